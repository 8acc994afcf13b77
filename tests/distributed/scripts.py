"""Scripted models for the distributed tests (the only sanctioned fake)."""

from __future__ import annotations

from collections.abc import Sequence

from synthorg.engine.native.scripts import Tools, steps_of
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage
from tests.faults.scripts import resilient_fix

SLOW_COMMAND = "sleep 8; echo slept"
"""A tool call long enough to kill its worker in the middle of it."""


def slow_then_fix(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """One slow command first (answered or not), then the demo fix from any state."""
    if not any(s.arguments.get("command") == SLOW_COMMAND for s in steps_of(messages)):
        return ScriptedTurn.call("terminal", "Taking a while.", command=SLOW_COMMAND)
    return resilient_fix(messages, tools)
