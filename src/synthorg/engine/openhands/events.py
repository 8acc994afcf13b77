"""The runtime's JSON event stream as typed records: OpenHandsEvent and the runtime's notices.

``OpenHandsEvent`` is the transport-neutral event of seed 000 (message / action / observation /
finished / error). Its validator keeps it honest: ``tool_name`` exists only on an action, and
token figures only on a turn (a message or an action). ``accumulated_cost`` is different: it is
the runtime's running total at this point of the stream (a position, not a figure of this
event), and every line carries it so the host can attribute per-turn deltas.

The runtime also reports things that are not agent events (its status, the system prompt, a
wait for confirmation, a refused control line): those are ``RuntimeNotice`` records.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    computed_field,
    model_validator,
)

from synthorg.engine.openhands.errors import OpenHandsRuntimeError

EventKind = Literal["message", "action", "observation", "finished", "error"]
NoticeKind = Literal[
    "status", "system", "confirmation_request", "decision_refused", "control_refused", "garbage"
]
FinishReason = Literal["finished", "max_turns", "stuck", "error"]

_TURN_KINDS = frozenset({"message", "action"})
_EVENT_KINDS = frozenset({"message", "action", "observation", "finished", "error"})
_NOTICE_KINDS = frozenset(
    {"status", "system", "confirmation_request", "decision_refused", "control_refused"}
)
MAX_ITERATIONS_CODE = "MaxIterationsReached"
"""The SDK's error code when a run hit its iteration cap (our turn cap)."""


class OpenHandsEvent(BaseModel):
    """One agent event from the runtime."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EventKind = Field(description="message / action / observation / finished / error.")
    event_id: str | None = Field(default=None, description="The SDK's event id (an action id).")
    source: str | None = Field(default=None, description="agent / user / environment.")
    text: str = Field(default="", description="Message text, observation output, error detail.")
    tool_name: str | None = Field(default=None, description="The tool an action calls.")
    tool_call_id: str | None = Field(default=None, description="The model's tool call id.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="An action's arguments.")
    summary: str = Field(default="", description="One-line summary of an action.")
    thought: str = Field(default="", description="The model's reasoning before an action.")
    risk: str | None = Field(default=None, description="Declared risk: LOW/MEDIUM/HIGH/UNKNOWN.")
    action_id: str | None = Field(default=None, description="The action an observation answers.")
    is_error: bool = Field(default=False, description="An observation reports a failure.")
    rejected: bool = Field(default=False, description="The observation is a rejection.")
    code: str | None = Field(default=None, description="An error's machine-readable code.")
    prompt_tokens: int | None = Field(default=None, ge=0, description="Turn's prompt tokens.")
    completion_tokens: int | None = Field(
        default=None, ge=0, description="Turn's completion tokens."
    )
    accumulated_cost: float | None = Field(
        default=None, ge=0, description="The runtime's running cost (USD) at this event."
    )

    @model_validator(mode="after")
    def _figures_where_they_belong(self) -> OpenHandsEvent:
        if self.tool_name is not None and self.kind != "action":
            raise ValueError(f"tool_name is only allowed on an action, not on {self.kind!r}")
        if self.kind not in _TURN_KINDS and (
            self.prompt_tokens is not None or self.completion_tokens is not None
        ):
            raise ValueError(
                f"token figures are only allowed on a turn (message or action), not {self.kind!r}"
            )
        if self.kind == "action" and not self.tool_name:
            raise ValueError("an action names the tool it calls")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def finish_reason(self) -> FinishReason | None:
        """Why the run ends with this event; None for events that do not end it."""
        if self.kind == "finished":
            return "finished"
        if self.kind != "error":
            return None
        if self.code == MAX_ITERATIONS_CODE:
            return "max_turns"
        if self.code == "stuck":
            return "stuck"
        return "error"

    @property
    def is_turn(self) -> bool:
        """A model call of the agent: an action, or a message the agent wrote."""
        return self.kind == "action" or (self.kind == "message" and self.source == "agent")


class PendingWire(BaseModel):
    """One action the runtime holds back for a decision."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    action_id: str = Field(min_length=1, description="The SDK action id to decide on.")
    tool_name: str = Field(default="", description="The tool it calls.")
    tool_call_id: str | None = Field(default=None, description="The model's tool call id.")
    risk: str | None = Field(default=None, description="Declared risk.")
    summary: str | None = Field(default=None, description="One-line summary for the approver.")


class RuntimeNotice(BaseModel):
    """A runtime record that is not an agent event (status, waits, refusals, garbage)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: NoticeKind = Field(description="What the runtime reports.")
    summary: str = Field(default="", description="status: started/resumed/paused/detached/...")
    text: str = Field(default="", description="Detail (refusal reason, the garbage line).")
    pending: tuple[PendingWire, ...] = Field(default=(), description="Actions waiting.")
    conversation_id: str | None = Field(default=None, description="The SDK conversation id.")
    persisted_events: int | None = Field(default=None, description="Events found on resume.")
    accumulated_cost: float | None = Field(
        default=None, ge=0, description="The runtime's running cost (USD) at this point."
    )


RuntimeRecord = OpenHandsEvent | RuntimeNotice
"""Anything the runtime's stdout carries, parsed."""


def _text(record: dict[str, Any], *keys: str) -> str:
    for key in keys:
        value = record.get(key)
        if value is not None:
            return str(value)
    return ""


def _event(record: dict[str, Any]) -> OpenHandsEvent:
    kind = record["kind"]
    arguments = record.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        arguments = {"raw": arguments}  # the model sent arguments that are not a JSON object
    turn = kind in _TURN_KINDS
    return OpenHandsEvent(
        kind=kind,
        event_id=record.get("id"),
        source=record.get("source"),
        text=_text(record, "content", "summary") if kind != "action" else "",
        tool_name=record.get("tool_name") if kind == "action" else None,
        tool_call_id=record.get("tool_call_id"),
        arguments=arguments or {},
        summary=_text(record, "summary") if kind == "action" else "",
        thought=_text(record, "thought"),
        risk=record.get("risk"),
        action_id=record.get("action_id"),
        is_error=bool(record.get("is_error", False)),
        rejected=bool(record.get("rejected", False)),
        code=record.get("code"),
        prompt_tokens=record.get("prompt_tokens") if turn else None,
        completion_tokens=record.get("completion_tokens") if turn else None,
        accumulated_cost=record.get("accumulated_cost"),
    )


def _notice(record: dict[str, Any]) -> RuntimeNotice:
    return RuntimeNotice(
        kind=record["kind"],
        summary=_text(record, "summary"),
        text=_text(record, "content"),
        pending=tuple(PendingWire.model_validate(p) for p in record.get("pending") or ()),
        conversation_id=record.get("conversation_id"),
        persisted_events=record.get("persisted_events"),
        accumulated_cost=record.get("accumulated_cost"),
    )


def parse_record(line: str) -> RuntimeRecord:
    """One stdout line of the runtime, parsed; OpenHandsRuntimeError saying why it is garbage."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise OpenHandsRuntimeError(f"not JSON: {exc}") from exc
    if not isinstance(record, dict):
        raise OpenHandsRuntimeError(f"not a JSON object but {type(record).__name__}")
    kind = record.get("kind")
    try:
        if kind in _EVENT_KINDS:
            return _event(record)
        if kind in _NOTICE_KINDS:
            return _notice(record)
    except ValidationError as exc:
        raise OpenHandsRuntimeError(
            f"invalid {kind} record: {exc.error_count()} problem(s)"
        ) from exc
    raise OpenHandsRuntimeError(f"unknown record kind {kind!r}")


def garbage(line: str, why: str) -> RuntimeNotice:
    """The notice that reports an unparseable line (clipped) instead of dying on it."""
    clipped = line if len(line) <= 500 else line[:500] + "..."
    return RuntimeNotice(kind="garbage", summary=why, text=clipped)
