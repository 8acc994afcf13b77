"""Scripted models (functions of the message history) for tests, benchmarks and the demo.

Each is a ``synthorg.gateway.scripted.ScriptedModel``: the gateway's scripted provider calls it
with the request's messages and tools and serves the returned turn as a completion. They read
the observations they get (test output, file contents) rather than replaying fixed text, so a
resumed conversation or a slightly different repository still works.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synthorg.gateway.scripted import ScriptedModel, ScriptedToolCall, ScriptedTurn
from synthorg.gateway.wire import ChatMessage

Tools = Sequence[Mapping[str, Any]] | None

TEST_COMMAND = (
    "export PYTHONPYCACHEPREFIX=$(mktemp -d); "
    "if python3 -c 'import pytest' 2>/dev/null; "
    "then python3 -m pytest -q -p no:cacheprovider 2>&1; "
    "else python3 -m unittest -v 2>&1; fi"
)
"""The repository's tests (pytest when available, else unittest); bytecode goes to a fresh
prefix so a same-size edit within the same second is never masked by a stale .pyc."""

_OPERATORS = {
    "add": "+",
    "plus": "+",
    "sum": "+",
    "sub": "-",
    "subtract": "-",
    "minus": "-",
    "mul": "*",
    "multiply": "*",
    "times": "*",
    "product": "*",
    "div": "/",
    "divide": "/",
}
_FAILED_TEST = re.compile(r"(?:FAILED \S*::|FAIL: |ERROR: )(test_\w+)")
_RETURN_BINOP = re.compile(r"^(\s*return\s+)(\w+)\s*([-+*/%]|//)\s*(\w+)\s*$")
_EXIT = re.compile(r"\[exit code: (-?\d+)\]")


@dataclass(frozen=True)
class Step:
    """One tool call of the history with its result (None until the result arrives)."""

    name: str
    arguments: dict[str, Any]
    result: str | None


def steps_of(messages: Sequence[ChatMessage]) -> list[Step]:
    """Every tool call in the history, in order, paired with its result."""
    results = {m.tool_call_id: m.text() for m in messages if m.role == "tool"}
    steps = []
    for message in messages:
        for call in message.tool_calls or ():
            try:
                args = json.loads(call.function.arguments or "{}")
            except ValueError:
                args = {}
            steps.append(
                Step(
                    call.function.name, args if isinstance(args, dict) else {}, results.get(call.id)
                )
            )
    return steps


def offered(tools: Tools) -> frozenset[str]:
    """Names of the tools the request offers."""
    return frozenset(str(t.get("function", {}).get("name", "")) for t in tools or ())


def exit_code(result: str | None) -> int | None:
    """The exit code a terminal observation reports."""
    found = _EXIT.findall(result or "")
    return int(found[-1]) if found else None


# -- the demo: fix a failing test -----------------------------------------------------------

DEMO_PLAN = (
    "Run the test suite to see what fails",
    "Read calc.py",
    "Fix the failing function in calc.py",
    "Re-run the tests to confirm the fix",
)


def demo_fix_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Run the tests, read calc.py, fix the wrong operator of the failing function, re-test.

    Works in every native loop: it writes a plan when ``write_plan`` is offered and none exists,
    closes each plan step with ``complete_step`` when that is offered, and otherwise finishes.
    """
    names = offered(tools)
    steps = steps_of(messages)
    if needs_plan(messages, tools):
        return ScriptedTurn.call("write_plan", "I will plan first.", steps=list(DEMO_PLAN))
    work = [s for s in steps if s.name in ("terminal", "file_editor")]
    if "complete_step" in names and steps and steps[-1].name in ("terminal", "file_editor"):
        last = steps[-1]
        code = exit_code(last.result)
        failed = last.name == "terminal" and code != 0 and _was_retest(work)
        return ScriptedTurn.call(
            "complete_step",
            outcome="failed" if failed else "done",
            summary=f"{last.name}: {(last.result or '').splitlines()[-1:] or ['ok']}",
        )
    action = _next_fix_action(work)
    if action is not None:
        return action
    message = _summary(work)
    if "finish" in names:
        return ScriptedTurn.call("finish", "Done.", message=message)
    return ScriptedTurn.say(message)


def needs_plan(messages: Sequence[ChatMessage], tools: Tools) -> bool:
    """write_plan is offered and no plan exists yet, or the loop just asked for a revision."""
    if "write_plan" not in offered(tools):
        return False
    last = messages[-1] if messages else None
    if last is not None and last.role == "user" and "revised plan" in last.text():
        return True
    return not any(s.name == "write_plan" for s in steps_of(messages))


def with_planning(script: ScriptedModel, steps: Sequence[str] = ("Do the work",)) -> ScriptedModel:
    """``script``, preceded by writing ``steps`` as the plan whenever a loop asks for one."""

    def planned(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
        if needs_plan(messages, tools):
            return ScriptedTurn.call("write_plan", steps=list(steps))
        return script(messages, tools)

    return planned


def _was_retest(work: list[Step]) -> bool:
    return any(
        s.name == "file_editor" and s.arguments.get("command") == "str_replace" for s in work
    )


def _next_fix_action(work: list[Step]) -> ScriptedTurn | None:
    test_runs = [
        s
        for s in work
        if s.name == "terminal"
        and s.arguments.get("command") == TEST_COMMAND
        and s.result is not None
    ]
    views = [
        s
        for s in work
        if s.name == "file_editor" and s.arguments.get("command") == "view" and s.result
    ]
    edits = [
        s
        for s in work
        if s.name == "file_editor"
        and s.arguments.get("command") == "str_replace"
        and s.result is not None
    ]
    if not test_runs:
        return ScriptedTurn.call("terminal", "Let me run the tests first.", command=TEST_COMMAND)
    last_test = test_runs[-1]
    if exit_code(last_test.result) == 0 or (edits and work[-1] is last_test):
        return None  # passing, or re-tested after the edit: nothing more to do
    if not views:
        return ScriptedTurn.call(
            "file_editor", "The tests fail; reading calc.py.", command="view", path="calc.py"
        )
    if not edits:
        fix = find_fix(views[-1].result or "", last_test.result or "")
        if fix is None:
            return None
        old, new = fix
        return ScriptedTurn.call(
            "file_editor",
            "Fixing the operator.",
            command="str_replace",
            path="calc.py",
            old_str=old,
            new_str=new,
        )
    return ScriptedTurn.call("terminal", "Re-running the tests.", command=TEST_COMMAND)


def find_fix(view: str, test_output: str) -> tuple[str, str] | None:
    """(old line, fixed line) for the first failing function with a wrong operator."""
    lines = [re.sub(r"^\s*\d+\t", "", line) for line in view.splitlines()]
    for test in _FAILED_TEST.findall(test_output):
        parts = test.removeprefix("test_").split("_")
        for cut in range(len(parts), 0, -1):
            name = "_".join(parts[:cut])
            op = _OPERATORS.get(name) or _OPERATORS.get(parts[cut - 1])
            fixed = _fix_function(lines, name, op) if op else None
            if fixed is not None:
                return fixed
    return None


def _fix_function(lines: list[str], name: str, op: str) -> tuple[str, str] | None:
    start = next(
        (i for i, line in enumerate(lines) if line.lstrip().startswith(f"def {name}(")), None
    )
    if start is None:
        return None
    for line in lines[start + 1 :]:
        if line.lstrip().startswith("def "):
            break
        match = _RETURN_BINOP.match(line)
        if match and match.group(3) != op:
            head, left, _, right = match.groups()
            return line, f"{head}{left} {op} {right}"
    return None


def _summary(work: list[Step]) -> str:
    edits = [s for s in work if s.arguments.get("command") == "str_replace"]
    if not edits:
        return "The tests pass; nothing needed fixing."
    args = edits[-1].arguments
    return (
        f"Fixed calc.py: replaced `{str(args.get('old_str', '')).strip()}` with "
        f"`{str(args.get('new_str', '')).strip()}`; the tests pass."
    )


# -- scripts for tests and benchmarks -------------------------------------------------------


def progress_script(
    total: int, *, pause_s: float = 0.0, call: Callable[..., ScriptedTurn] = ScriptedTurn.call
) -> ScriptedModel:
    """Appends 1..total to progress.txt, one command per turn, then finishes.

    The next number is one more than the results confirming a number, so a resumed
    conversation continues where the log says it stopped. ``call`` makes a tool call (the
    OpenHands scripts add a declared risk).
    """
    sleep = f" && sleep {pause_s:g}" if pause_s else ""

    def script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
        confirmed = [
            s
            for s in steps_of(messages)
            if s.name == "terminal" and "confirmed-" in (s.result or "")
        ]
        n = len(confirmed) + 1
        if n > total:
            return call("finish", message=f"wrote {total} lines")
        return call(
            "terminal",
            f"Writing line {n}.",
            command=f"echo {n} >> progress.txt && echo confirmed-{n}{sleep}",
        )

    return script


def endless_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Never finishes: a new (distinct) command every turn; for budget/cancel/turn-cap tests."""
    n = sum(1 for m in messages if m.role == "assistant") + 1
    return ScriptedTurn.call("terminal", command=f"echo turn {n}")


def repeating_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Runs the same command forever: stuck."""
    return ScriptedTurn.call("terminal", command="ls")


def idle_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Plans if asked, closes every step and finishes without doing any work (NO_OP)."""
    if needs_plan(messages, tools):
        return ScriptedTurn.call("write_plan", steps=["Decide that nothing needs doing"])
    if "complete_step" in offered(tools):
        return ScriptedTurn.call("complete_step", outcome="done", summary="nothing to do")
    return ScriptedTurn.call("finish", message="nothing to do")


def chatty_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Answers in prose and never calls a tool (NO_OP for a task expecting changes)."""
    return ScriptedTurn.say("I think the code looks fine as it is.")


INVALID_CALLS: tuple[tuple[str, str], ...] = (
    ("terminal", "{not json"),
    ("terminal", "[1, 2]"),
    ("terminal", json.dumps({})),
    ("terminal", json.dumps({"command": "ls", "verbose": True})),
    ("terminal", json.dumps({"command": 42})),
    ("file_editor", json.dumps({"command": "create", "path": "x.txt"})),
    ("file_editor", json.dumps({"command": "delete", "path": "x.txt"})),
    ("rm_everything", json.dumps({"path": "/"})),
)
"""Malformed calls: bad JSON, non-object, missing/extra fields, wrong type, unknown tool."""


def invalid_args_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Makes each malformed call of INVALID_CALLS, then a valid edit, then finishes."""
    n = sum(1 for m in messages if m.role == "assistant")
    if n < len(INVALID_CALLS):
        name, raw = INVALID_CALLS[n]
        return ScriptedTurn(tool_calls=(ScriptedToolCall(name, raw),))
    if n == len(INVALID_CALLS):
        return ScriptedTurn.call("file_editor", command="create", path="ok.txt", file_text="ok\n")
    return ScriptedTurn.call("finish", message="recovered from invalid calls")
