"""Event validators: inconsistent events are refused with messages that say why."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from synthorg.domain import (
    ActionEvent,
    ConfirmationDecisionEvent,
    MessageEvent,
    ObservationEvent,
    TokenUsage,
    parse_event,
)


def test_tool_name_only_on_action() -> None:
    with pytest.raises(ValidationError, match="tool_name is only allowed on an action"):
        parse_event({"kind": "message", "role": "assistant", "text": "hi", "tool_name": "x"})
    with pytest.raises(ValidationError, match="tool_name is only allowed on an action"):
        parse_event({"kind": "observation", "action_id": "a1", "content": "", "tool_name": "x"})
    action = parse_event({"kind": "action", "action_id": "a1", "tool_name": "terminal"})
    assert isinstance(action, ActionEvent)


def test_usage_only_on_turns() -> None:
    usage = {"tokens_in": 1, "tokens_out": 2, "cost_usd": "0.1"}
    with pytest.raises(ValidationError, match="only allowed on a turn"):
        parse_event({"kind": "observation", "action_id": "a1", "content": "x", "usage": usage})
    with pytest.raises(ValidationError, match="only allowed on a turn"):
        parse_event({"kind": "finished", "usage": usage})
    message = parse_event({"kind": "message", "role": "assistant", "text": "t", "usage": usage})
    assert isinstance(message, MessageEvent)
    assert message.usage == TokenUsage(tokens_in=1, tokens_out=2, cost_usd=Decimal("0.1"))


def test_decision_names_actions_and_is_disjoint() -> None:
    with pytest.raises(ValidationError, match="at least one action id"):
        ConfirmationDecisionEvent(approver="alice")
    with pytest.raises(ValidationError, match="both accepted and rejected"):
        ConfirmationDecisionEvent(accepted=("a1",), rejected=("a1",), approver="alice")
    with pytest.raises(ValidationError):
        ConfirmationDecisionEvent(accepted=("a1",), approver="")


def test_events_round_trip_json() -> None:
    event = ObservationEvent(action_id="act-1", content="ok", exit_code=0)
    assert parse_event(event.model_dump_json()) == event


def test_unsafe_ids_refused() -> None:
    with pytest.raises(ValidationError):
        ActionEvent(action_id="../etc", tool_name="terminal")


def test_unknown_kind_refused() -> None:
    with pytest.raises(ValidationError):
        parse_event({"kind": "teleport"})


def test_constructors_check_without_an_explicit_kind() -> None:
    with pytest.raises(ValidationError, match="only allowed on a turn"):
        ObservationEvent(action_id="a1", content="x", usage=TokenUsage())  # type: ignore[call-arg]
    assert MessageEvent(role="user", text="t", usage=TokenUsage()).usage == TokenUsage()


def test_event_kinds_name_every_event_class() -> None:
    from typing import get_args

    from synthorg.domain import EVENT_KINDS, ConversationEvent

    union = get_args(get_args(ConversationEvent)[0])
    assert {cls.model_fields["kind"].default for cls in union} == EVENT_KINDS
