"""Scripted models used by the service tests (importable as ``tests.service.scripts``)."""

from __future__ import annotations

from collections.abc import Sequence

from synthorg.engine.native.prompts import RESUMED
from synthorg.engine.native.scripts import Tools, progress_script, steps_of
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage

progress_five = progress_script(5, pause_s=0.3)


def look_then_finish(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Lists the worktree once (a work tool that changes nothing), then finishes."""
    if any(s.name == "terminal" and s.result is not None for s in steps_of(messages)):
        return ScriptedTurn.call("finish", message="looked around; nothing to change")
    return ScriptedTurn.call("terminal", command="ls")


def look_until_resumed(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Lists the worktree every turn; once resumed, finishes without changing anything."""
    if any(m.role == "user" and RESUMED in str(m.content or "") for m in messages):
        return ScriptedTurn.call("finish", message="done, nothing changed")
    n = sum(1 for m in messages if m.role == "assistant") + 1
    return ScriptedTurn.call("terminal", command=f"ls && echo look {n}")


def leak_a_secret(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Writes a .env file (the commit gate refuses it), then finishes."""
    if steps_of(messages):
        return ScriptedTurn.call("finish", message="wrote the settings")
    return ScriptedTurn.call("terminal", command="echo TOKEN=x > .env")
