"""Scripts for resume tests that record every request the scripted upstream receives."""

from __future__ import annotations

from collections.abc import Sequence

from synthorg.engine.native.scripts import Tools, steps_of
from synthorg.engine.openhands.scripts import call
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage

REQUESTS: list[list[ChatMessage]] = []
"""Every request this process's scripted upstream served, in order (the messages as sent)."""

UNKNOWN = "effect is unknown"
STALL = True
"""Whether line 3 stalls: true in the host that is killed, false in the process that resumes
(a resumed run that was not told about the stalled command then fails fast, not hangs)."""


def _answered_unknown(messages: Sequence[ChatMessage]) -> bool:
    return any(UNKNOWN in (s.result or "") for s in steps_of(messages))


def stall_at_three(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Lines 1 and 2 of progress.txt, then line 3 and a command that never returns (kill it
    there); once told the stalled command's effect is unknown, finishes (else goes on to 5)."""
    REQUESTS.append(list(messages))
    if _answered_unknown(messages):
        return call("finish", message="checked progress.txt after the restart")
    done = sum(1 for s in steps_of(messages) if "confirmed-" in (s.result or ""))
    n = done + 1
    if n > 5:
        return call("finish", message="wrote 5 lines")
    stall = " && sleep 600" if n == 3 and STALL else ""
    return call("terminal", command=f"echo {n} >> progress.txt{stall} && echo confirmed-{n}")


def risky_once(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """A HIGH-risk command that waits for a decision (kill the host there); then a low-risk
    one (the work, so the run is not NO_OP), then finish."""
    REQUESTS.append(list(messages))
    steps = steps_of(messages)
    if not steps:
        return call("terminal", "This deletes files.", risk="HIGH", command="echo gone > x.txt")
    if len(steps) == 1:
        return call("terminal", "Checking first.", command="echo checked > checked.txt")
    return call("finish", message="done after the restart")
