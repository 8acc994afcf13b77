"""Scripted models of different skill for evaluations without a model key (tests, demos).

They are real models to the gateway (functions of the history, served by the scripted
provider); they differ only in how much of a starter task they get right, which is what the
statistics and the promotion are tested with:
- ``strong_script``: runs the tests, reads the file the task names, fixes the wrong operator,
  re-runs the tests (and, when a fix did not take, reads and fixes once more), finishes;
- ``weak_script``: the same on one task in three, gives up on the others;
- ``plan_averse_script``: strong when the loop just acts (react), gives up as soon as a loop
  asks it for a plan (plan_execute, hybrid) — a loop whose structure hurts this model.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from synthorg.engine.native.scripts import (
    TEST_COMMAND,
    Step,
    Tools,
    exit_code,
    find_fix,
    needs_plan,
    offered,
    steps_of,
)
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage

_NAMED_FILE = re.compile(r"`([\w./-]+\.py)`")
_FIX_ATTEMPTS = 2


def _task_text(messages: Sequence[ChatMessage]) -> str:
    return next((m.text() for m in messages if m.role == "user"), "")


def _give_up(tools: Tools) -> ScriptedTurn:
    message = "I could not find the bug."
    if "finish" in offered(tools):
        return ScriptedTurn.call("finish", message, message=message)
    return ScriptedTurn.say(message)


def strong_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Fix the wrong operator in the file the task names; finish when the tests pass."""
    if needs_plan(messages, tools):
        plan = ["Run the tests", "Read the named file", "Fix it", "Re-run the tests"]
        return ScriptedTurn.call("write_plan", "Planning.", steps=plan)
    names = offered(tools)
    steps = steps_of(messages)
    if "complete_step" in names and steps and steps[-1].name in ("terminal", "file_editor"):
        return ScriptedTurn.call("complete_step", outcome="done", summary=steps[-1].name)
    work = [s for s in steps if s.name in ("terminal", "file_editor")]
    action = _next_action(work, _task_text(messages))
    if action is not None:
        return action
    if "finish" in names:
        return ScriptedTurn.call("finish", "Done.", message="Fixed; the tests pass.")
    return ScriptedTurn.say("Fixed; the tests pass.")


def _next_action(work: list[Step], task: str) -> ScriptedTurn | None:
    named = _NAMED_FILE.search(task)
    if named is None:
        return None
    path = named.group(1)
    # A step the host reports with its effect unknown (the run was killed mid-step) says
    # nothing: tests are run again, a file is read again.
    tests = [s for s in work if s.name == "terminal" and exit_code(s.result) is not None]
    views = [s for s in work if s.arguments.get("command") == "view"]
    edits = [s for s in work if s.arguments.get("command") == "str_replace"]
    last = work[-1] if work else None
    if not tests or (last is not None and last.name == "terminal" and last is not tests[-1]):
        return ScriptedTurn.call("terminal", "Running the tests.", command=TEST_COMMAND)
    if exit_code(tests[-1].result) == 0:
        return None
    read = ScriptedTurn.call("file_editor", "Reading it.", command="view", path=path)
    if last is tests[-1]:
        # Failing tests: read the file, or read it again once after a fix that did not take
        # (a run killed mid-edit resumes with that edit's effect unknown).
        return None if len(edits) >= _FIX_ATTEMPTS else read
    if views and last is views[-1]:
        if "\t" not in (last.result or ""):  # no numbered listing came back
            return read if len(views) <= _FIX_ATTEMPTS else None
        fix = find_fix(last.result or "", tests[-1].result or "")
        if fix is None or (edits and fix != _edit_of(edits[-1])):
            return None  # no wrong operator left, or one the earlier fix did not aim at
        old, new = fix
        return ScriptedTurn.call(
            "file_editor", "Fixing.", command="str_replace", path=path, old_str=old, new_str=new
        )
    return ScriptedTurn.call("terminal", "Re-running the tests.", command=TEST_COMMAND)


def _edit_of(step: Step) -> tuple[str, str]:
    return str(step.arguments.get("old_str", "")), str(step.arguments.get("new_str", ""))


def weak_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Strong on one task in three (by a hash of the task text), gives up on the rest."""
    digest = hashlib.sha256(_task_text(messages).encode()).digest()
    if digest[0] % 3 != 0:
        return _give_up(tools)
    return strong_script(messages, tools)


def plan_averse_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Strong in a loop that just acts; gives up when a loop makes it plan first."""
    if "write_plan" in offered(tools):
        return _give_up(tools)
    return strong_script(messages, tools)
