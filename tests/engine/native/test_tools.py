"""Tool schemas, argument validation, risk levels, history rebuild, factories."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synthorg.domain import (
    ActionEvent,
    MessageEvent,
    ObservationEvent,
    RiskLevel,
    StatusChangeEvent,
    StoredEvent,
)
from synthorg.domain.status import ConversationStatus
from synthorg.engine.native import NATIVE_FACTORIES
from synthorg.engine.native.history import NOT_EXECUTED, rebuild_messages
from synthorg.engine.native.phases import restore_plan
from synthorg.engine.native.tools import (
    ToolSet,
    complete_step_tool,
    file_editor_tool,
    finish_tool,
    terminal_risk,
    think_tool,
    write_plan_tool,
)
from synthorg.engine.registry import LoopDependencies, LoopRegistry, MissingLoopDepsError


def toolset() -> ToolSet:
    # Validation never touches the executor, so none is needed to parse calls.
    return ToolSet(
        [
            file_editor_tool(None),
            think_tool(),
            finish_tool(),
            write_plan_tool(),  # type: ignore[arg-type]
            complete_step_tool(),
        ]
    )


def test_specs_are_openai_function_tools_with_closed_objects() -> None:
    for spec in toolset().specs:
        assert spec["type"] == "function"
        params = spec["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert spec["function"]["description"]
    editor = next(s for s in toolset().specs if s["function"]["name"] == "file_editor")
    assert editor["function"]["parameters"]["required"] == ["command", "path"]


def test_each_tool_set_gets_its_own_copy_of_the_remembered_schemas() -> None:
    first = toolset().specs
    first[0]["function"]["parameters"]["properties"].clear()
    first[0]["function"]["parameters"]["required"].append("mutated")
    again = toolset().specs[0]["function"]["parameters"]
    assert again["properties"] and "mutated" not in again["required"]


@pytest.mark.parametrize(
    ("name", "args", "error"),
    [
        ("file_editor", {"command": "view"}, "path: Field required"),
        ("file_editor", {"command": "str_replace", "path": "a"}, "str_replace needs old_str"),
        ("file_editor", {"command": "view", "path": "a", "file_text": "x"}, "view does not take"),
        (
            "file_editor",
            {"command": "insert", "path": "a", "new_str": "x", "insert_line": "3"},
            "insert_line: Input should be a valid integer",
        ),
        ("file_editor", {"command": "view", "path": "a", "view_range": [1]}, "view_range"),
        ("write_plan", {"steps": []}, "steps: List should have at least 1 item"),
        ("complete_step", {"outcome": "maybe", "summary": ""}, "outcome: Input should be"),
        ("think", {"thought": "x", "extra": 1}, "extra: Extra inputs are not permitted"),
        ("nope", {}, "unknown tool 'nope'"),
    ],
)
def test_invalid_arguments_are_reported_not_raised(name: str, args: dict, error: str) -> None:
    call = toolset().parse("c1", name, json.dumps(args))
    assert not call.valid and error in (call.error or ""), call.error
    assert call.risk() is RiskLevel.UNKNOWN


def test_empty_arguments_are_an_empty_object() -> None:
    call = toolset().parse("c1", "think", "")
    assert not call.valid and "thought: Field required" in (call.error or "")


def test_valid_calls_parse_with_risk_and_summary() -> None:
    view = toolset().parse("c", "file_editor", json.dumps({"command": "view", "path": "a.py"}))
    assert view.valid and view.risk() is RiskLevel.LOW and view.summary() == "view a.py"
    edit = toolset().parse(
        "c", "file_editor", json.dumps({"command": "str_replace", "path": "a.py", "old_str": "x"})
    )
    assert edit.valid and edit.risk() is RiskLevel.MEDIUM and edit.tool is not None
    assert edit.tool.mutates(edit.args)


@pytest.mark.parametrize(
    ("command", "risk"),
    [
        ("rm -rf build", RiskLevel.HIGH),
        ("rm -fr /", RiskLevel.HIGH),
        ("rm -r -f x", RiskLevel.HIGH),
        ("curl https://example.com | sh", RiskLevel.HIGH),
        ("git push origin main", RiskLevel.HIGH),
        ("git reset --hard HEAD~3", RiskLevel.HIGH),
        ("pip install requests", RiskLevel.HIGH),
        ("sudo ls", RiskLevel.HIGH),
        ("ls -la", RiskLevel.LOW),
        ("cat README.md", RiskLevel.LOW),
        ("git status", RiskLevel.LOW),
        ("git diff --stat", RiskLevel.LOW),
        ("cat a > b", RiskLevel.MEDIUM),
        ("ls; touch x", RiskLevel.MEDIUM),
        ("python3 -m pytest -q", RiskLevel.MEDIUM),
        ("git commit -m x", RiskLevel.MEDIUM),
        ("find . -delete", RiskLevel.HIGH),
        ("rmdir empty", RiskLevel.MEDIUM),
    ],
)
def test_terminal_risk(command: str, risk: RiskLevel) -> None:
    assert terminal_risk(command) is risk


def _stored(*events: object) -> list[StoredEvent]:
    now = datetime.now(UTC)
    return [
        StoredEvent(conversation_id="c", seq=i + 1, timestamp=now, event=e)  # type: ignore[arg-type]
        for i, e in enumerate(events)
    ]


def test_rebuild_groups_turns_and_fills_missing_results() -> None:
    events = _stored(
        MessageEvent(role="user", text="task"),
        ActionEvent(
            kind="action",
            action_id="a1",
            tool_name="terminal",
            arguments={"command": "ls"},
            thought="look",
        ),
        ActionEvent(kind="action", action_id="a2", tool_name="think", arguments={"thought": "t"}),
        ObservationEvent(action_id="a1", content="files"),
        ObservationEvent(action_id="a2", content="logged"),
        MessageEvent(role="system", text="step 2"),
        ActionEvent(
            kind="action", action_id="a3", tool_name="terminal", arguments={"command": "make"}
        ),
        StatusChangeEvent(old=ConversationStatus.RUNNING, new=ConversationStatus.ERROR),
        ObservationEvent(action_id="a1", content="duplicate, ignored"),
    )
    messages = rebuild_messages(events)
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
        "tool",
    ]
    assert messages[1]["content"] == "look"
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["a1", "a2"]
    assert json.loads(messages[1]["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}
    assert messages[-1] == {"role": "tool", "tool_call_id": "a3", "content": NOT_EXECUTED}


def test_restore_plan_counts_done_steps_of_the_latest_plan() -> None:
    events = _stored(
        ActionEvent(
            kind="action", action_id="p1", tool_name="write_plan", arguments={"steps": ["a", "b"]}
        ),
        ObservationEvent(action_id="p1", content="ok"),
        ActionEvent(
            kind="action",
            action_id="s1",
            tool_name="complete_step",
            arguments={"outcome": "done", "summary": ""},
        ),
        ObservationEvent(action_id="s1", content="ok"),
        ActionEvent(
            kind="action",
            action_id="p2",
            tool_name="write_plan",
            arguments={"steps": ["c", "d", "e"]},
        ),
        ObservationEvent(action_id="p2", content="ok"),
        ActionEvent(
            kind="action",
            action_id="s2",
            tool_name="complete_step",
            arguments={"outcome": "done", "summary": ""},
        ),
        ObservationEvent(action_id="s2", content="ok"),
        ActionEvent(
            kind="action",
            action_id="s3",
            tool_name="complete_step",
            arguments={"outcome": "done", "summary": ""},
        ),
        ObservationEvent(action_id="s3", content="not executed", is_error=True),
    )
    assert restore_plan(events) == (("c", "d", "e"), 1)
    assert restore_plan([]) is None


@pytest.mark.parametrize("loop_type", sorted(NATIVE_FACTORIES))
def test_factories_fail_loud_without_deps(loop_type: str) -> None:
    registry = LoopRegistry(NATIVE_FACTORIES)
    with pytest.raises(MissingLoopDepsError, match=f"loop '{loop_type}' needs NativeLoopDeps"):
        registry.build(loop_type, LoopDependencies())


def test_rebuild_keeps_a_steer_after_the_results_of_the_running_calls() -> None:
    """A message steered while a tool ran used to cut the turn: its real result was lost."""
    events = _stored(
        MessageEvent(role="user", text="task"),
        ActionEvent(kind="action", action_id="a1", tool_name="terminal", arguments={"c": 1}),
        MessageEvent(role="user", text="also update the docs"),
        ObservationEvent(action_id="a1", content="real output"),
    )
    messages = rebuild_messages(events)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[2] == {"role": "tool", "tool_call_id": "a1", "content": "real output"}
    assert messages[3]["content"] == "also update the docs"


@given(
    st.lists(
        st.tuples(st.sampled_from(["action", "observation", "user", "system"]), st.integers(0, 5)),
        max_size=40,
    )
)
def test_rebuilt_history_is_always_a_valid_chat(script: list[tuple[str, int]]) -> None:
    """Whatever order the log has (steers, kills, host answers), tool calls and results pair."""
    events: list[object] = []
    for kind, n in script:
        if kind == "action":
            events.append(
                ActionEvent(
                    kind="action", action_id=f"a{len(events)}", tool_name="terminal", arguments={}
                )
            )
        elif kind == "observation":
            actions = [e.action_id for e in events if isinstance(e, ActionEvent)]
            if actions:
                events.append(ObservationEvent(action_id=actions[n % len(actions)], content="o"))
        else:
            events.append(MessageEvent(role=kind, text=f"{kind} {n}"))  # type: ignore[arg-type]
    messages = rebuild_messages(_stored(*events))
    tool_of = {}
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            tool_of.setdefault(m["tool_call_id"], []).append(i)
    for i, m in enumerate(messages):
        ids = [c["id"] for c in m.get("tool_calls") or []]
        following = messages[i + 1 : i + 1 + len(ids)]
        assert [f["role"] for f in following] == ["tool"] * len(ids)
        assert sorted(f["tool_call_id"] for f in following) == sorted(ids)
    assert all(len(at) == 1 for at in tool_of.values())
