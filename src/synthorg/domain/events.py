"""Conversation events: every step of a run, as stored in the durable log.

Events are a tagged union on ``kind``. Validators keep them consistent: a tool name exists only
on an action, token/cost figures only on a turn (message or action), a confirmation decision
names the actions it decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from synthorg.domain.ids import ActionId, ConversationId
from synthorg.domain.risk import RiskLevel
from synthorg.domain.status import ConversationStatus
from synthorg.domain.usage import TokenUsage


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _kind_of(cls: type[BaseModel]) -> object:
    return cls.model_fields["kind"].default


class _NoToolName(BaseModel):
    # Declared only to refuse it with a message that says why. A field validator runs only
    # when the field is given, so valid events (and replaying the log) pay nothing for it.
    tool_name: None = Field(default=None, exclude=True, description="Only actions name a tool.")

    @field_validator("tool_name", mode="before")
    @classmethod
    def _only_on_actions(cls, value: object) -> None:
        if value is not None:
            raise ValueError(
                f"tool_name is only allowed on an action event, not on {_kind_of(cls)!r}"
            )


class _NoUsage(BaseModel):
    usage: None = Field(default=None, exclude=True, description="Only turns carry usage.")

    @field_validator("usage", mode="before")
    @classmethod
    def _only_on_turns(cls, value: object) -> None:
        if value is not None:
            raise ValueError(
                "usage (token/cost figures) is only allowed on a turn (message or action), "
                f"not on {_kind_of(cls)!r}"
            )


class MessageEvent(_NoToolName, _Event):
    """A message from the user, the assistant or the system."""

    kind: Literal["message"] = "message"
    role: Literal["user", "assistant", "system"] = Field(description="Who speaks.")
    text: str = Field(description="The message text.")
    usage: TokenUsage | None = Field(default=None, description="Model usage of this turn.")


class ActionEvent(_Event):
    """The agent decided to call a tool."""

    kind: Literal["action"] = "action"
    action_id: ActionId = Field(description="Unique id, referenced by observation and decisions.")
    tool_name: str = Field(min_length=1, description="The tool called.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool arguments.")
    summary: str = Field(default="", description="One-line human summary of the action.")
    thought: str = Field(default="", description="The model's reasoning text before the call.")
    risk: RiskLevel = Field(default=RiskLevel.UNKNOWN, description="Declared risk.")
    usage: TokenUsage | None = Field(default=None, description="Model usage of this turn.")


class ObservationEvent(_NoToolName, _NoUsage, _Event):
    """The result of an action."""

    kind: Literal["observation"] = "observation"
    action_id: ActionId = Field(description="The action this observes.")
    content: str = Field(description="Tool output shown to the model.")
    is_error: bool = Field(default=False, description="Whether the tool failed.")
    exit_code: int | None = Field(default=None, description="Exit code of a terminal command.")
    non_retryable: bool = Field(
        default=False, description="The effect is unknown; the action must not be blindly retried."
    )


class FinishedEvent(_NoToolName, _NoUsage, _Event):
    """The agent declared the task done."""

    kind: Literal["finished"] = "finished"
    message: str = Field(default="", description="The agent's closing summary.")


class ErrorEvent(_NoToolName, _NoUsage, _Event):
    """Something failed; the run may or may not continue."""

    kind: Literal["error"] = "error"
    message: str = Field(description="What went wrong, for people.")
    code: str = Field(default="error", description="Machine-readable error class.")
    action_id: ActionId | None = Field(default=None, description="The action involved, if any.")
    non_retryable: bool = Field(default=False, description="Retrying cannot help.")


class StatusChangeEvent(_NoToolName, _NoUsage, _Event):
    """The conversation moved from one status to another."""

    kind: Literal["status_change"] = "status_change"
    old: ConversationStatus | None = Field(description="Status before (None at creation).")
    new: ConversationStatus = Field(description="Status after.")
    reason: str = Field(default="", description="Why, for people.")
    termination_reason: str | None = Field(
        default=None, description="TerminationReason value when the run ended."
    )


class PauseEvent(_NoToolName, _NoUsage, _Event):
    """A pause was requested; it takes effect after the in-flight model call."""

    kind: Literal["pause"] = "pause"
    requested_by: str = Field(default="", description="Principal who asked.")


class InterruptEvent(_NoToolName, _NoUsage, _Event):
    """The run was interrupted immediately; the conversation stays resumable."""

    kind: Literal["interrupt"] = "interrupt"
    requested_by: str = Field(default="", description="Principal who asked.")


class CancelEvent(_NoToolName, _NoUsage, _Event):
    """The run was cancelled: stopped immediately, the conversation ends cancelled."""

    kind: Literal["cancel"] = "cancel"
    requested_by: str = Field(default="", description="Principal who asked.")


class PendingAction(BaseModel):
    """An action waiting for a human decision."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action_id: ActionId = Field(description="The action's id.")
    tool_name: str = Field(description="The tool it calls.")
    summary: str = Field(default="", description="Arguments summary for the approver.")
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="The tool arguments, complete: exactly what will run."
    )
    risk: RiskLevel = Field(default=RiskLevel.UNKNOWN, description="Declared risk.")


class ConfirmationRequestEvent(_NoToolName, _NoUsage, _Event):
    """The run waits for decisions on these actions."""

    kind: Literal["confirmation_request"] = "confirmation_request"
    pending: tuple[PendingAction, ...] = Field(min_length=1, description="Actions awaiting.")


class ConfirmationDecisionEvent(_NoToolName, _NoUsage, _Event):
    """An authenticated person accepted and/or rejected named pending actions."""

    kind: Literal["confirmation_decision"] = "confirmation_decision"
    accepted: tuple[ActionId, ...] = Field(default=(), description="Action ids approved.")
    rejected: tuple[ActionId, ...] = Field(default=(), description="Action ids refused.")
    reason: str = Field(default="", description="Why (shown to the agent on rejection).")
    approver: str = Field(min_length=1, description="The authenticated principal who decided.")

    @model_validator(mode="after")
    def _names_actions(self) -> ConfirmationDecisionEvent:
        if not self.accepted and not self.rejected:
            raise ValueError("a confirmation decision must name at least one action id")
        both = decided_both(self.accepted, self.rejected)
        if both:
            raise ValueError(f"action ids both accepted and rejected: {both}")
        return self


def decided_both(accepted: Iterable[str], rejected: Iterable[str]) -> list[str]:
    """Action ids a decision both accepts and rejects: the one rule a decision must pass
    (the logged event here; every caller's Decision in engine.control)."""
    return sorted(set(accepted) & set(rejected))


class ToolAuditEvent(_NoToolName, _NoUsage, _Event):
    """A credentialed tool call made through the MCP server, audited (no secrets)."""

    kind: Literal["tool_audit"] = "tool_audit"
    tool: str = Field(description="The MCP tool called.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Arguments, redacted.")
    outcome: Literal["started", "ok", "refused", "error", "unknown"] = Field(
        description="How the call ended; 'started' is the intent, written before acting; "
        "'unknown': its effect may have happened and could not be checked."
    )
    detail: str = Field(default="", description="Result or refusal message, redacted.")
    duration_ms: float = Field(ge=0, description="Wall time of the call.")


class CheckpointEvent(_NoToolName, _NoUsage, _Event):
    """The workspace was snapshotted before a mutating action (and, for a worktree published
    to a remote, again after it, before its observation)."""

    kind: Literal["checkpoint"] = "checkpoint"
    index: int = Field(ge=0, description="Checkpoint number n.")
    ref: str = Field(description="The hidden git ref holding the snapshot.")
    action_id: ActionId | None = Field(
        default=None,
        description="The action it precedes (or, taken after it, follows).",
    )


ConversationEvent = Annotated[
    MessageEvent
    | ActionEvent
    | ObservationEvent
    | FinishedEvent
    | ErrorEvent
    | StatusChangeEvent
    | PauseEvent
    | InterruptEvent
    | CancelEvent
    | ConfirmationRequestEvent
    | ConfirmationDecisionEvent
    | ToolAuditEvent
    | CheckpointEvent,
    Field(discriminator="kind"),
]
"""Any event of a conversation."""

EVENT_ADAPTER: TypeAdapter[ConversationEvent] = TypeAdapter(ConversationEvent)

EventKind = Literal[
    "message",
    "action",
    "observation",
    "finished",
    "error",
    "status_change",
    "pause",
    "interrupt",
    "cancel",
    "confirmation_request",
    "confirmation_decision",
    "tool_audit",
    "checkpoint",
]
"""The ``kind`` of every event, for filters and schemas."""

EVENT_KINDS: frozenset[str] = frozenset(get_args(EventKind))


SEQ_MAX = 2**63 - 1
"""The largest event seq: both stores keep it as a signed 64-bit integer, so a cursor past it
is refused at the boundary (SQLite would raise OverflowError, PostgreSQL out of range)."""


class StoredEvent(BaseModel):
    """An event as the log holds it: durable, numbered, timestamped."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    conversation_id: ConversationId = Field(description="The conversation it belongs to.")
    seq: int = Field(
        ge=1, le=SEQ_MAX, description="Monotonic per-conversation sequence number, from 1."
    )
    timestamp: datetime = Field(description="When it was appended (UTC).")
    event: ConversationEvent = Field(description="The event itself.")


def parse_event(data: dict[str, Any] | str | bytes) -> ConversationEvent:
    """Validate an event from a dict or JSON text."""
    if isinstance(data, dict):
        return EVENT_ADAPTER.validate_python(data)
    return EVENT_ADAPTER.validate_json(data)
