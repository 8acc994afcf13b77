"""Scripted models for the real-service server tests (importable as ``real_scripts:<attr>``)."""

from __future__ import annotations

from synthorg.engine.native.scripts import progress_script
from synthorg.gateway.scripted import ScriptedModel


def progress3() -> ScriptedModel:
    """Three real commands, then finish."""
    return progress_script(3)


def progress5() -> ScriptedModel:
    """Five real commands, then finish (the stress suite's conversation)."""
    return progress_script(5)


def slow50() -> ScriptedModel:
    """Fifty commands of 0.3 s each: long enough to pause, interrupt and cancel."""
    return progress_script(50, pause_s=0.3)


def stuck() -> ScriptedModel:
    """A command that sleeps for a minute: a process killed meanwhile dies mid-tool-call."""
    return progress_script(1, pause_s=60)


def done() -> ScriptedModel:
    """Finishes at once without a tool call (NO_OP): a run that costs next to nothing."""
    from synthorg.gateway.scripted import ScriptedTurn

    def script(messages: object, tools: object) -> ScriptedTurn:
        return ScriptedTurn.call("finish", message="nothing to do")

    return script
