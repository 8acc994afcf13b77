"""The run fence: writes made for a run carry its owner id; the store refuses them once the
conversation has another owner (a zombie — a paused or partitioned process whose run was
taken over — must not append to a log it no longer owns).

Set by ``RunOwnership.held`` for the run's task (context variables follow its subtasks);
writes made outside a run (control, reconciliation) are not fenced. PostgreSQL enforces it
(the store workers share); SQLite serves one machine and ignores it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

RUN_FENCE: ContextVar[str | None] = ContextVar("synthorg_run_fence", default=None)
"""The owner id this task's writes are made for; None when they are not fenced."""


@contextmanager
def fenced(owner_id: str) -> Iterator[None]:
    """Fence the current task's (and its new subtasks') writes to ``owner_id``."""
    token = RUN_FENCE.set(owner_id)
    try:
        yield
    finally:
        RUN_FENCE.reset(token)


def lost(conversation_id: str, owner_id: str) -> str:
    """The message of a fenced write refused."""
    return (
        f"write refused: conversation {conversation_id} is no longer owned by {owner_id} "
        "(another process took it over); this run stops here"
    )
