"""The store's own errors: a conversation owned by another live process, a store not answering."""

from __future__ import annotations

from synthorg.errors import BoundaryError, ConflictError
from synthorg.store.protocol import RunOwner

RESUME_HINT = "the conversation stays resumable: fix the store, then `synthorg run --resume <id>`"


class ConversationOwnedError(ConflictError):
    """Another live process owns the conversation; carries who (host, pid, since)."""

    def __init__(self, conversation_id: str, holder: RunOwner) -> None:
        self.conversation_id = conversation_id
        self.holder = holder
        super().__init__(
            f"conversation {conversation_id} is already being run by {holder.describe()}; "
            "wait for that run to end (or stop it) before starting another"
        )


class StoreUnavailableError(BoundaryError):
    """The store did not answer within its bounded wait, or refused a write.

    Locked, read-only, full, unreachable or stalled: the message names the store and what
    to do; nothing hangs.
    """


class LeaseLostError(ConflictError):
    """This process no longer owns the conversation it was running (its lease ran out)."""
