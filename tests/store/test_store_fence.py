"""The run fence on PostgreSQL: once another owner took a conversation over, the old owner's
appends and status transitions are refused and leave nothing behind."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
from store_helpers import record, uid

from synthorg.domain import ConversationStatus, MessageEvent, StatusChangeEvent
from synthorg.store import RunClaimant, Store, open_store
from synthorg.store.errors import LeaseLostError
from synthorg.store.fence import fenced

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg(pg_schema_url: str) -> AsyncIterator[Store]:
    opened = await open_store(pg_schema_url)
    try:
        yield opened
    finally:
        await opened.close()


def _who() -> RunClaimant:
    return RunClaimant(owner_id=uid("own"), host="host-a", pid=os.getpid())


async def test_a_taken_over_owner_can_neither_append_nor_transition(pg: Store) -> None:
    rec = record()
    await pg.create_conversation(rec)
    old, new = _who(), _who()
    await pg.claim_conversation(rec.id, old, lease_s=0)  # its lease runs out at once
    with fenced(old.owner_id):
        await pg.append(rec.id, MessageEvent(role="assistant", text="while I own it"))
    await pg.claim_conversation(rec.id, new, lease_s=60)  # taken over
    before = await pg.last_seq(rec.id)
    current = await pg.get_conversation(rec.id)
    change = StatusChangeEvent(old=current.status, new=ConversationStatus.RUNNING)
    with fenced(old.owner_id):
        with pytest.raises(LeaseLostError, match="no longer owned"):
            await pg.append(rec.id, MessageEvent(role="assistant", text="zombie"))
        with pytest.raises(LeaseLostError):
            await pg.transition(current.model_copy(update={"status": change.new}), change)
    assert await pg.last_seq(rec.id) == before
    assert (await pg.get_conversation(rec.id)).status is current.status
    with fenced(new.owner_id):
        await pg.append(rec.id, MessageEvent(role="assistant", text="the new owner"))
    await pg.append(rec.id, MessageEvent(role="user", text="unfenced: control, reconcile"))
    assert await pg.last_seq(rec.id) == before + 2
