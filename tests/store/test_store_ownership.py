"""Store contract: one owner per conversation (atomic claim, lease, displace); transitions."""

from __future__ import annotations

import asyncio
import os

import pytest
from store_helpers import record, uid

from synthorg.domain import ConversationStatus, StatusChangeEvent
from synthorg.errors import NotFoundError, UsageError
from synthorg.store import RunClaimant, Store, open_store
from synthorg.store.errors import ConversationOwnedError
from synthorg.store.protocol import ExecutionStatus
from synthorg.store.reconcile import claimant, take_over


def _who(host: str = "host-a") -> RunClaimant:
    return RunClaimant(owner_id=uid("own"), host=host, pid=os.getpid())


async def test_a_second_claimant_is_refused_with_the_holder_named(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    first, second = _who("host-a"), _who("host-b")
    owner = await store.claim_conversation(rec.id, first, lease_s=60)
    assert (owner.owner_id, owner.host, owner.pid, owner.expired) == (
        first.owner_id,
        "host-a",
        os.getpid(),
        False,
    )
    with pytest.raises(ConversationOwnedError) as refused:
        await store.claim_conversation(rec.id, second, lease_s=60)
    assert refused.value.holder.owner_id == first.owner_id
    text = str(refused.value)
    assert "host-a" in text and f"pid {os.getpid()}" in text and "since" in text
    # Re-entrant for the holder, keeping when it took the conversation.
    again = await store.claim_conversation(rec.id, first, lease_s=60)
    assert again.since == owner.since
    await store.release_conversation(rec.id, second.owner_id)  # not the holder: no effect
    assert (await store.conversation_owner(rec.id)) is not None
    await store.release_conversation(rec.id, first.owner_id)
    assert await store.conversation_owner(rec.id) is None
    assert (await store.claim_conversation(rec.id, second, lease_s=60)).host == "host-b"


async def test_an_expired_lease_can_be_taken_and_its_holder_learns_it(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    old, new = _who(), _who()
    await store.claim_conversation(rec.id, old, lease_s=0)
    held = await store.conversation_owner(rec.id)
    assert held is not None and held.expired
    await store.claim_conversation(rec.id, new, lease_s=60)
    assert not await store.renew_claim(rec.id, old.owner_id, lease_s=60)
    assert await store.renew_claim(rec.id, new.owner_id, lease_s=60)


async def test_of_concurrent_displacers_exactly_one_wins(store_url: str) -> None:
    stores = [await open_store(store_url) for _ in range(3)]
    try:
        rec = record()
        await stores[0].create_conversation(rec)
        dead = _who()
        await stores[0].claim_conversation(rec.id, dead, lease_s=600)
        claimants = [_who() for _ in range(12)]
        results = await asyncio.gather(
            *(
                stores[i % 3].claim_conversation(rec.id, c, lease_s=60, displace=dead.owner_id)
                for i, c in enumerate(claimants)
            ),
            return_exceptions=True,
        )
        won = [r for r in results if not isinstance(r, BaseException)]
        assert len(won) == 1, results
        assert all(isinstance(r, ConversationOwnedError) for r in results if r not in won)
        holder = await stores[0].conversation_owner(rec.id)
        assert holder is not None and holder.owner_id == won[0].owner_id
    finally:
        for s in stores:
            await s.close()


async def test_claiming_an_unknown_conversation_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.claim_conversation(uid(), _who(), lease_s=60)


async def test_a_transition_writes_row_and_event_together(store: Store) -> None:
    rec = record()
    await store.create_conversation(rec)
    running = rec.model_copy(update={"status": ConversationStatus.RUNNING})
    stored = await store.transition(
        running, StatusChangeEvent(old=rec.status, new=ConversationStatus.RUNNING)
    )
    assert stored.seq == await store.last_seq(rec.id)
    assert (await store.get_conversation(rec.id)).status is ConversationStatus.RUNNING
    # Record and event disagreeing is refused before anything is written.
    with pytest.raises(UsageError):
        await store.transition(
            running, StatusChangeEvent(old=rec.status, new=ConversationStatus.FINISHED)
        )
    # Unknown conversation: neither half lands.
    ghost = record(status=ConversationStatus.RUNNING)
    with pytest.raises(NotFoundError):
        await store.transition(ghost, StatusChangeEvent(old=None, new=ConversationStatus.RUNNING))
    assert await store.last_seq(rec.id) == stored.seq


async def test_an_execution_lives_on_its_owners_lease(store: Store) -> None:
    """Issue 29 (1): the ledger row of a run carries its owner's lease and is renewed with it;
    a row opened with no owner (a manual bearer) is not leased, and a lost owner renews
    nothing."""
    rec = record()
    await store.create_conversation(rec)
    manual = await store.open_execution(
        execution_id=uid("exec"),
        conversation_id=rec.id,
        model="m",
        provider="p",
        cost_ceiling_usd=None,
    )
    assert manual.lease_expires_at is None
    await store.set_execution_status(manual.execution_id, ExecutionStatus.FINISHED, "done")
    me = _who()
    owner = await store.claim_conversation(rec.id, me, lease_s=60)
    row = await store.open_execution(
        execution_id=uid("exec"),
        conversation_id=rec.id,
        model="m",
        provider="p",
        cost_ceiling_usd=None,
    )
    assert row.lease_expires_at == owner.expires_at
    assert await store.renew_claim(rec.id, me.owner_id, lease_s=600)
    renewed = await store.get_execution(row.execution_id)
    held = await store.conversation_owner(rec.id)
    assert held is not None and renewed.lease_expires_at == held.expires_at
    assert renewed.lease_expires_at is not None and row.lease_expires_at is not None
    assert renewed.lease_expires_at > row.lease_expires_at
    assert not await store.renew_claim(rec.id, uid("own"), lease_s=6000)  # not the owner
    assert (await store.get_execution(row.execution_id)).lease_expires_at == held.expires_at


async def test_a_takeover_kills_the_previous_runs_open_execution(store: Store) -> None:
    """Issue 29 (1, 3): once another process takes a conversation over (a resume after a
    crash, a reconciler), the dead run's execution is killed: its bearer stays dead."""
    rec = record(status=ConversationStatus.RUNNING)
    await store.create_conversation(rec)
    dead = RunClaimant(owner_id=uid("own"), host="elsewhere", pid=1)
    await store.claim_conversation(rec.id, dead, lease_s=0.05)
    row = await store.open_execution(
        execution_id=uid("exec"),
        conversation_id=rec.id,
        model="m",
        provider="p",
        cost_ceiling_usd=None,
    )
    holder = await store.conversation_owner(rec.id)
    while holder is not None and not holder.expired:  # bounded by the 0.05 s lease
        await asyncio.sleep(0.05)
        holder = await store.conversation_owner(rec.id)
    owner, _ = await take_over(store, rec.id, claimant())
    killed = await store.get_execution(row.execution_id)
    assert killed.status is ExecutionStatus.KILLED
    assert "superseded" in killed.status_reason and "elsewhere" in killed.status_reason
    assert (await store.get_conversation(rec.id)).status is ConversationStatus.INTERRUPTED
    await store.release_conversation(rec.id, owner.owner_id)
