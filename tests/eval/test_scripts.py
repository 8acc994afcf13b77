"""The strong scripted model after a resume: a step whose effect is unknown is redone.

A run killed mid-step resumes with the host's own observation for that step ("effect
unknown"); the strong model must then re-run the tests / re-read / re-fix instead of giving
up (the eval's kill-and-resume test judged the loop on where the kill landed otherwise).
"""

from __future__ import annotations

import json

import pytest

from synthorg.engine.native.scripts import TEST_COMMAND
from synthorg.eval.scripts import strong_script
from synthorg.gateway.wire import ChatMessage, FunctionCall, ToolCall

TOOLS = [
    {"type": "function", "function": {"name": n}} for n in ("terminal", "file_editor", "finish")
]
UNKNOWN = (
    "the process running this conversation died while this tool was in progress; its effect "
    "is unknown: check the workspace before repeating it"
)
FAILING = (
    "FAIL: test_vector_subtract (test_vector.VectorTest.test_vector_subtract)\n"
    "AssertionError: 12 != 4\nFAILED (failures=1)\n[exit code: 1]"
)
VIEW = "     1\tdef vector_subtract(a: int, b: int) -> int:\n     2\t    return a + b"
FIX = {"command": "str_replace", "path": "calc.py", "old_str": "    return a + b",
       "new_str": "    return a - b"}  # fmt: skip


def _history(*steps: tuple[str, dict[str, str], str]) -> list[ChatMessage]:
    messages = [ChatMessage(role="user", content="The tests fail. Find the bug in `calc.py`.")]
    for n, (tool, args, result) in enumerate(steps):
        call = ToolCall(id=f"c{n}", function=FunctionCall(name=tool, arguments=json.dumps(args)))
        messages.append(ChatMessage(role="assistant", tool_calls=[call]))
        messages.append(ChatMessage(role="tool", tool_call_id=f"c{n}", content=result))
    return messages


def _next(*steps: tuple[str, dict[str, str], str]) -> tuple[str, dict[str, object]]:
    turn = strong_script(_history(*steps), TOOLS)
    assert turn.tool_calls, turn
    call = turn.tool_calls[0]
    return call.name, json.loads(call.arguments_json())


TESTS = ("terminal", {"command": TEST_COMMAND}, FAILING)
READ = ("file_editor", {"command": "view", "path": "calc.py"}, VIEW)


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([("terminal", {"command": TEST_COMMAND}, UNKNOWN)], ("terminal", "run the tests again")),
        (
            [TESTS, ("file_editor", {"command": "view", "path": "calc.py"}, UNKNOWN)],
            ("file_editor", "read the file again"),
        ),
        ([TESTS, READ, ("file_editor", FIX, UNKNOWN)], ("terminal", "check the edit")),
        ([TESTS, READ, ("file_editor", FIX, UNKNOWN), TESTS], ("file_editor", "read again")),
        ([TESTS, READ, ("file_editor", FIX, UNKNOWN), TESTS, READ], ("file_editor", "fix again")),
    ],
)
def test_a_step_with_unknown_effect_is_redone(
    steps: list[tuple[str, dict[str, str], str]], expected: tuple[str, str]
) -> None:
    tool, _why = expected
    name, args = _next(*steps)
    assert name == tool, (name, args)
    if _why == "fix again":
        assert args == FIX


def test_a_fix_that_took_but_failed_is_not_repeated() -> None:
    """Tests still fail after a fix that did take: a different bug; this model finishes."""
    fixed_view = VIEW.replace("a + b", "a - b")
    steps = [TESTS, READ, ("file_editor", FIX, "edited"), TESTS,
             ("file_editor", {"command": "view", "path": "calc.py"}, fixed_view)]  # fmt: skip
    name, _ = _next(*steps)
    assert name == "finish"
