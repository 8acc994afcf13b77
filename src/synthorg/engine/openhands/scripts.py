"""Scripted models that fit OpenHands' own tools, for tests, benchmarks and the demo.

OpenHands' ``file_editor`` wants absolute paths and its ``terminal`` reports
``[Current working directory: ...]`` and ``[Command finished with exit code N]``, so the native
scripts (relative paths, ``[exit code: N]``) do not fit. These read the working directory from
the first terminal result, and declare a ``security_risk`` on every call (LOW unless told), as
a model must when the security analyzer is on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from synthorg.engine.native.scripts import TEST_COMMAND, Step, find_fix, progress_script, steps_of
from synthorg.gateway.scripted import ScriptedModel, ScriptedToolCall, ScriptedTurn
from synthorg.gateway.wire import ChatMessage

Tools = Sequence[Mapping[str, Any]] | None

_CWD = re.compile(r"\[Current working directory: ([^\]]+)\]")
_EXIT = re.compile(r"exit code (-?\d+)")


def call(name: str, text: str | None = None, risk: str = "LOW", **arguments: Any) -> ScriptedTurn:
    """One OpenHands tool call with a declared risk (the SDK ignores it without an analyzer)."""
    return ScriptedTurn(
        text=text, tool_calls=(ScriptedToolCall(name, {**arguments, "security_risk": risk}),)
    )


def working_dir(steps: Sequence[Step]) -> str | None:
    """The terminal's working directory as its last result reported it."""
    for step in reversed(steps):
        found = _CWD.findall(step.result or "")
        if found:
            return str(found[-1]).strip()
    return None


def exit_code(result: str | None) -> int | None:
    """The exit code an OpenHands terminal result reports."""
    found = _EXIT.findall(result or "")
    return int(found[-1]) if found else None


def openhands_fix_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """The demo with OpenHands' tools: run the tests, view calc.py, fix the operator, re-test."""
    steps = [s for s in steps_of(messages) if s.name in ("terminal", "file_editor")]
    tests = [s for s in steps if s.name == "terminal" and s.result is not None]
    views = [s for s in steps if s.arguments.get("command") == "view" and s.result]
    edits = [s for s in steps if s.arguments.get("command") == "str_replace" and s.result]
    if not tests:
        return call("terminal", "Let me run the tests first.", command=TEST_COMMAND)
    cwd = working_dir(tests) or "/workspace"
    passing = exit_code(tests[-1].result) == 0
    if not passing and not views:
        return call(
            "file_editor", "The tests fail; reading calc.py.", command="view", path=f"{cwd}/calc.py"
        )
    if not passing and not edits:
        fix = find_fix(views[-1].result or "", tests[-1].result or "")
        if fix is not None:
            old, new = fix
            return call(
                "file_editor",
                "Fixing the operator.",
                command="str_replace",
                path=f"{cwd}/calc.py",
                old_str=old,
                new_str=new,
            )
    if edits and steps[-1] is edits[-1]:
        return call("terminal", "Re-running the tests.", command=TEST_COMMAND)
    if not edits:
        return call("finish", message="The tests pass; nothing needed fixing.")
    args = edits[-1].arguments
    return call(
        "finish",
        message=f"Fixed calc.py: replaced `{str(args.get('old_str', '')).strip()}` with "
        f"`{str(args.get('new_str', '')).strip()}`; the tests pass.",
    )


def openhands_progress_script(total: int, *, pause_s: float = 0.0) -> ScriptedModel:
    """Appends 1..total to progress.txt, one terminal command per turn, then finishes.

    The next number follows the results confirming earlier ones, so a resumed conversation
    continues where its persisted history stopped.
    """
    return progress_script(total, pause_s=pause_s, call=call)


def openhands_endless_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Never finishes: a new terminal command every turn (budget, cancellation, turn caps)."""
    n = sum(1 for m in messages if m.role == "assistant") + 1
    return call("terminal", command=f"echo turn {n}")


def openhands_sleep_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """One long terminal command: a run to cancel while a tool is in flight."""
    if not steps_of(messages):
        return call("terminal", command="sleep 67.25 && echo woke")
    return call("finish", message="slept")


def openhands_risky_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """A HIGH-risk command (waits for confirmation under 'risky'), then finish."""
    if not steps_of(messages):
        return call(
            "terminal",
            "This deletes files.",
            risk="HIGH",
            command="rm -f doomed.txt && echo gone > removed.txt",
        )
    return call("finish", message="removed doomed.txt")


def openhands_idle_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Finishes at once without doing any work (NO_OP for a task expecting changes)."""
    return call("finish", message="nothing to do")


def openhands_progress_five() -> ScriptedModel:
    """progress.txt with five lines, a second per command (resume after a kill)."""
    return openhands_progress_script(5, pause_s=1.0)
