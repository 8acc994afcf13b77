"""Scripts for the native resume tests: they record every request the upstream receives."""

from __future__ import annotations

from collections.abc import Sequence

from synthorg.engine.native.scripts import Tools, steps_of
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage

REQUESTS: list[list[ChatMessage]] = []
"""Every request this process's scripted upstream served, in order."""


def stall_at_three(stall: bool = True):  # type: ignore[no-untyped-def]
    """Lines 1 and 2 of progress.txt, then line 3 with a command that never returns (when
    ``stall``); told that a command's effect is unknown, finishes; else goes on to 5."""

    def script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
        REQUESTS.append(list(messages))
        if any("effect is unknown" in (s.result or "") for s in steps_of(messages)):
            return ScriptedTurn.call("finish", message="checked progress.txt after the restart")
        n = sum(1 for s in steps_of(messages) if "confirmed-" in (s.result or "")) + 1
        if n > 5:
            return ScriptedTurn.call("finish", message="wrote 5 lines")
        wait = " && sleep 600" if n == 3 and stall else ""
        return ScriptedTurn.call(
            "terminal", command=f"echo {n} >> progress.txt{wait} && echo confirmed-{n}"
        )

    return script


def ask_then_finish(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """A command that waits for a decision under ALWAYS (kill it there), then finish."""
    REQUESTS.append(list(messages))
    if steps_of(messages):
        return ScriptedTurn.call("finish", message="done after the restart")
    return ScriptedTurn.call("terminal", command="echo gone > removed.txt")
