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


TRAVEL_COMMAND = "echo travelled > travelled.txt"
"""A first change, in the checkpoint taken before the slow command: it must travel."""


def travel_then_fix(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Write a file, then the slow command (killed in the middle), then the demo fix."""
    if not any(s.arguments.get("command") == TRAVEL_COMMAND for s in steps_of(messages)):
        return ScriptedTurn.call("terminal", "Leaving a mark.", command=TRAVEL_COMMAND)
    return slow_then_fix(messages, tools)


SETTLE_COMMAND = "echo settled > settled.txt"
"""A change whose observation is logged before the worker dies, with no checkpoint after it."""
READ_FOREVER = "tail -f calc.py"
"""A read-only call (no checkpoint before it) that does not return: the worker dies in it."""


def settle_then_read(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Write a file, then a read that never returns (killed in it), then the demo fix."""
    done = [s.arguments.get("command") for s in steps_of(messages)]
    if SETTLE_COMMAND not in done:
        return ScriptedTurn.call("terminal", "Leaving a mark.", command=SETTLE_COMMAND)
    if READ_FOREVER not in done:
        return ScriptedTurn.call("terminal", "Watching.", command=READ_FOREVER)
    return resilient_fix(messages, tools)


MARK_COMMAND = "echo mark >> marks.txt"
"""A tool call that leaves one line per execution in the landed tree (re-runs show)."""


def marked_fix(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Leave a mark (once, answered or not), then the demo fix from any state."""
    if not any(s.arguments.get("command") == MARK_COMMAND for s in steps_of(messages)):
        return ScriptedTurn.call("terminal", "Leaving a mark.", command=MARK_COMMAND)
    return resilient_fix(messages, tools)


FROZEN_COMMAND = "sleep 60; echo late >> late.txt"
"""A call its worker is frozen in (SIGSTOP): its late write must land nowhere."""


def frozen_then_fix(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """The long call first (answered "effect unknown" after the takeover), then the fix."""
    if not any(s.arguments.get("command") == FROZEN_COMMAND for s in steps_of(messages)):
        return ScriptedTurn.call("terminal", "Taking long.", command=FROZEN_COMMAND)
    return resilient_fix(messages, tools)
