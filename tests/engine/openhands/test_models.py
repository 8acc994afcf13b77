"""Validator rules of the adapter's models: events, outcome, spec, config and deps."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from synthorg.engine.openhands import (
    OpenHandsEvent,
    OpenHandsLoopConfig,
    OpenHandsLoopError,
    OpenHandsOutcome,
    OpenHandsRunSpec,
    OpenHandsRuntimeError,
    RuntimeNotice,
    parse_record,
)
from synthorg.engine.openhands.fake import action, confirmation_request, error, observation

from .helpers import make_deps


def test_tool_name_only_on_an_action() -> None:
    OpenHandsEvent(kind="action", tool_name="terminal", event_id="a")
    with pytest.raises(ValidationError, match="tool_name is only allowed on an action"):
        OpenHandsEvent(kind="observation", tool_name="terminal")
    with pytest.raises(ValidationError, match="names the tool"):
        OpenHandsEvent(kind="action", event_id="a")


@pytest.mark.parametrize("kind", ["observation", "finished", "error"])
def test_token_figures_only_on_a_turn(kind: str) -> None:
    with pytest.raises(ValidationError, match="only allowed on a turn"):
        OpenHandsEvent(kind=kind, prompt_tokens=3)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="only allowed on a turn"):
        OpenHandsEvent(kind=kind, completion_tokens=3)  # type: ignore[arg-type]
    # The running cost is a stream position, carried by every record.
    assert OpenHandsEvent(kind=kind, accumulated_cost=0.5).accumulated_cost == 0.5  # type: ignore[arg-type]


def test_message_carries_token_figures() -> None:
    event = OpenHandsEvent(kind="message", source="agent", prompt_tokens=1, completion_tokens=2)
    assert event.is_turn


def test_finish_reason_is_computed() -> None:
    assert OpenHandsEvent(kind="finished").finish_reason == "finished"
    assert OpenHandsEvent(kind="error", code="MaxIterationsReached").finish_reason == "max_turns"
    assert OpenHandsEvent(kind="error", code="stuck").finish_reason == "stuck"
    assert OpenHandsEvent(kind="error").finish_reason == "error"
    assert OpenHandsEvent(kind="action", tool_name="finish").finish_reason is None
    dumped = OpenHandsEvent(kind="finished").model_dump()
    assert dumped["finish_reason"] == "finished"


def test_parse_wire_records() -> None:
    parsed = parse_record(json.dumps(action("a1", "terminal", 0.1, prompt=5, command="ls")))
    assert isinstance(parsed, OpenHandsEvent)
    assert (parsed.tool_name, parsed.event_id, parsed.arguments) == (
        "terminal",
        "a1",
        {"command": "ls"},
    )
    obs = parse_record(json.dumps({**observation("a1", "out", 0.1), "tool_name": "terminal"}))
    assert isinstance(obs, OpenHandsEvent) and obs.tool_name is None  # wire extras dropped
    err = parse_record(json.dumps(error("boom", 0.2, code="x")))
    assert isinstance(err, OpenHandsEvent) and (err.text, err.code) == ("boom", "x")
    request = parse_record(json.dumps(confirmation_request(0.1, ("a1", "terminal", "HIGH"))))
    assert isinstance(request, RuntimeNotice) and request.pending[0].action_id == "a1"
    raw = parse_record(json.dumps({**action("a2", "terminal", 0.1), "arguments": "not json"}))
    assert isinstance(raw, OpenHandsEvent) and raw.arguments == {"raw": "not json"}


@pytest.mark.parametrize("line", ["", "nope", "[]", "3", '{"kind": "x"}', '{"no": "kind"}'])
def test_garbage_is_an_error_naming_why(line: str) -> None:
    with pytest.raises(OpenHandsRuntimeError):
        parse_record(line)


def test_outcome_finish_and_error_are_exclusive() -> None:
    with pytest.raises(ValidationError, match="mutually exclusive"):
        OpenHandsOutcome(finished=True, error="boom")
    assert OpenHandsOutcome(finished=True).error is None
    assert not OpenHandsOutcome(error="boom").finished


def test_spec_matches_the_entrypoint_wire() -> None:
    spec = OpenHandsRunSpec(
        task_prompt="t",
        model="m",
        gateway_base_url="http://127.0.0.1:18080/v1",
        gateway_token="secret-bearer",
        workspace_path="/workspace",
        persistence_dir="/state",
        conversation_id="conv-1",
        max_turns=3,
        project_id="p",
    )
    wire = json.loads(spec.wire_line())
    assert wire["gateway_token"] == "secret-bearer"
    assert set(wire) >= {"task_prompt", "confirmation_policy", "terminal_type"}
    assert "secret-bearer" not in repr(spec)
    with pytest.raises(ValidationError):
        OpenHandsRunSpec.model_validate({**wire, "unknown": 1})


def test_config_is_frozen() -> None:
    config = OpenHandsLoopConfig(max_turns=5)
    with pytest.raises(ValidationError):
        config.max_turns = 6  # type: ignore[misc]
    with pytest.raises(ValidationError):
        OpenHandsLoopConfig(max_turns=0)


@pytest.mark.parametrize(
    "urls",
    [
        {"gateway_base_url": ""},
        {"gateway_base_url": "   "},
        {"gateway_base_url": "http://x/v1", "mcp_base_url": ""},
    ],
)
def test_blank_urls_are_rejected_at_construction(urls: dict[str, str]) -> None:
    from synthorg.engine.openhands import OpenHandsLoopDeps
    from synthorg.engine.openhands.fake import FakeConversationFactory

    with pytest.raises(OpenHandsLoopError, match="blank"):
        OpenHandsLoopDeps(
            conversation_factory=FakeConversationFactory(),
            **urls,  # type: ignore[arg-type]
        )
    deps, _ = make_deps([])
    assert deps.mcp_base_url
