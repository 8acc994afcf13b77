"""Conversation status and run termination reasons."""

from __future__ import annotations

from enum import StrEnum


class ConversationStatus(StrEnum):
    """Lifecycle of a conversation. Transitions are explicit and evented."""

    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    WAITING_CONFIRMATION = "waiting_confirmation"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    """The process that owned the run died (kill -9, crash, lost lease); resumable."""

    @property
    def is_active(self) -> bool:
        """A run is in progress (a process is working or waiting on a person)."""
        return self in _ACTIVE

    @property
    def is_ended(self) -> bool:
        """The last run ended on its own terms (finished, failed, cancelled, error); a new run
        may still continue the conversation with a message."""
        return self in _ENDED

    def may_become(self, new: ConversationStatus) -> bool:
        """Whether a conversation in this status may move to ``new`` (the transition table).

        Nothing returns to CREATED; only a run in progress waits for a decision; only a run
        in progress is INTERRUPTED (its owner died). Every other move is legal: a run in
        progress may end any way, and any conversation not in progress may be started again
        (RUNNING) or ended before its loop starts (a refused worktree, a stop during set-up).
        """
        if new is ConversationStatus.CREATED:
            return self is ConversationStatus.CREATED
        if new in (ConversationStatus.WAITING_CONFIRMATION, ConversationStatus.INTERRUPTED):
            return self.is_active or self is new
        return True


_ACTIVE = frozenset({ConversationStatus.RUNNING, ConversationStatus.WAITING_CONFIRMATION})
_ENDED = frozenset(
    {
        ConversationStatus.FINISHED,
        ConversationStatus.FAILED,
        ConversationStatus.CANCELLED,
        ConversationStatus.ERROR,
    }
)


class TerminationReason(StrEnum):
    """Why a run of an execution loop ended."""

    COMPLETED = "completed"
    MAX_TURNS = "max_turns"
    BUDGET_EXHAUSTED = "budget_exhausted"
    SHUTDOWN = "shutdown"
    CANCELLED = "cancelled"
    PAUSED = "paused"
    ERROR = "error"
    NO_OP = "no_op"

    def conversation_status(self) -> ConversationStatus:
        """The conversation status a run ending this way leaves behind.

        NO_OP is routed to FAILED: a task that was expected to change something and did
        nothing is never a silent success. SHUTDOWN and PAUSED leave the conversation
        resumable.
        """
        return _STATUS_AFTER[self]


_STATUS_AFTER = {
    TerminationReason.COMPLETED: ConversationStatus.FINISHED,
    TerminationReason.MAX_TURNS: ConversationStatus.FAILED,
    TerminationReason.BUDGET_EXHAUSTED: ConversationStatus.FAILED,
    TerminationReason.SHUTDOWN: ConversationStatus.PAUSED,
    TerminationReason.CANCELLED: ConversationStatus.CANCELLED,
    TerminationReason.PAUSED: ConversationStatus.PAUSED,
    TerminationReason.ERROR: ConversationStatus.ERROR,
    TerminationReason.NO_OP: ConversationStatus.FAILED,
}
