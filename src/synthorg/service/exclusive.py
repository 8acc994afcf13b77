"""Holding a conversation as a run would, for work no run may overlap (rollback, delete)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from synthorg.errors import ConflictError
from synthorg.service.active import ActiveRuns
from synthorg.service.ownership import claim_run
from synthorg.store.errors import ConversationOwnedError
from synthorg.store.protocol import Store

Claim = Callable[[str], contextlib.AbstractAsyncContextManager[None]]
"""``claimed`` bound to a service's store, active runs and lease."""


@contextlib.asynccontextmanager
async def claimed(
    store: Store, runs: ActiveRuns, conversation_id: str, *, lease_s: float
) -> AsyncIterator[None]:
    """Hold the conversation as a run would, so no run starts in it meanwhile: in this
    process (ConflictError while one is active) and across processes (refused while a
    live process owns it; a dead owner's leftovers are reconciled first)."""
    try:
        active = runs.claim(conversation_id)
    except ConflictError:
        raise ConflictError(f"conversation {conversation_id} is running; cancel it first") from None
    try:
        try:
            ownership = await claim_run(store, conversation_id, lease_s=lease_s)
        except ConversationOwnedError as owned:
            raise ConflictError(
                f"conversation {conversation_id} is held by another process "
                f"({owned.holder.describe()}); wait for it to let go or stop its run"
            ) from None
        async with ownership.held():
            yield
    finally:
        runs.end(conversation_id, active)
