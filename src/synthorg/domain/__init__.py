"""Pure, frozen domain models: ids, tasks, events, results. No I/O, no imports of ours."""

from synthorg.domain.binding import RunBinding
from synthorg.domain.conversation import ConversationRecord, WorkspaceInfo
from synthorg.domain.events import (
    EVENT_ADAPTER,
    EVENT_KINDS,
    SEQ_MAX,
    ActionEvent,
    CancelEvent,
    CheckpointEvent,
    ConfirmationDecisionEvent,
    ConfirmationRequestEvent,
    ConversationEvent,
    ErrorEvent,
    EventKind,
    FinishedEvent,
    InterruptEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    PendingAction,
    StatusChangeEvent,
    StoredEvent,
    ToolAuditEvent,
    parse_event,
)
from synthorg.domain.ids import new_id
from synthorg.domain.results import ExecutionResult, TurnRecord
from synthorg.domain.risk import ConfirmationPolicy, RiskLevel
from synthorg.domain.status import ConversationStatus, TerminationReason
from synthorg.domain.task import AgentIdentity, Complexity, Task
from synthorg.domain.usage import TokenUsage

__all__ = [
    "EVENT_ADAPTER",
    "EVENT_KINDS",
    "SEQ_MAX",
    "ActionEvent",
    "AgentIdentity",
    "CancelEvent",
    "CheckpointEvent",
    "Complexity",
    "ConfirmationDecisionEvent",
    "ConfirmationPolicy",
    "ConfirmationRequestEvent",
    "ConversationEvent",
    "ConversationRecord",
    "ConversationStatus",
    "ErrorEvent",
    "EventKind",
    "ExecutionResult",
    "FinishedEvent",
    "InterruptEvent",
    "MessageEvent",
    "ObservationEvent",
    "PauseEvent",
    "PendingAction",
    "RiskLevel",
    "RunBinding",
    "StatusChangeEvent",
    "StoredEvent",
    "Task",
    "TerminationReason",
    "TokenUsage",
    "ToolAuditEvent",
    "TurnRecord",
    "WorkspaceInfo",
    "new_id",
    "parse_event",
]
