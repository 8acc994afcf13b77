"""The execution ledger: idempotent open, atomic usage under concurrency, killed stays killed."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from store_helpers import record, uid

from synthorg.errors import NotFoundError
from synthorg.service.tree import committed_spend
from synthorg.store import ExecutionStatus, Store, open_store
from synthorg.store.protocol import BudgetHold, SharedBudgetLedger


async def _open(store: Store, execution_id: str, ceiling: Decimal | None = None) -> None:
    await store.open_execution(
        execution_id=execution_id,
        conversation_id=uid(),
        model="m",
        provider="p",
        cost_ceiling_usd=ceiling,
    )


async def test_open_is_idempotent_and_unknown_is_not_found(store: Store) -> None:
    ex = uid("ex")
    await _open(store, ex, Decimal("1.50"))
    await store.record_usage(ex, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.01"))
    again = await store.open_execution(
        execution_id=ex, conversation_id="other", model="m", provider="p", cost_ceiling_usd=None
    )
    assert again.requests == 1
    assert again.cost_ceiling_usd == Decimal("1.50")
    assert again.status is ExecutionStatus.ACTIVE
    with pytest.raises(NotFoundError):
        await store.get_execution(uid("ex"))
    with pytest.raises(NotFoundError):
        await store.record_usage(uid("ex"), tokens_in=1, tokens_out=1, cost_usd=Decimal(0))


async def test_concurrent_usage_is_never_lost(store_url: str, store: Store) -> None:
    ex = uid("ex")
    await _open(store, ex)
    other = await open_store(store_url)  # a second connection set, as another process would
    try:
        cost = Decimal("0.000123")
        calls = [
            s.record_usage(ex, tokens_in=10, tokens_out=3, cost_usd=cost)
            for s in (store, other)
            for _ in range(60)
        ]
        results = await asyncio.gather(*calls)
    finally:
        await other.close()
    final = await store.get_execution(ex)
    assert final.requests == 120
    assert (final.tokens_in, final.tokens_out) == (1200, 360)
    assert final.cost_usd == cost * 120
    # every caller saw a distinct running total
    assert sorted(r.requests for r in results) == list(range(1, 121))


async def test_killed_stays_killed(store: Store) -> None:
    ex = uid("ex")
    await _open(store, ex)
    killed = await store.set_execution_status(ex, ExecutionStatus.KILLED, "budget exhausted")
    assert killed.status is ExecutionStatus.KILLED
    for status in (ExecutionStatus.ACTIVE, ExecutionStatus.FINISHED):
        after = await store.set_execution_status(ex, status, "late")
        assert after.status is ExecutionStatus.KILLED
        assert after.status_reason == "budget exhausted"
    used = await store.record_usage(ex, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.5"))
    assert used.status is ExecutionStatus.KILLED
    assert used.cost_usd == Decimal("0.5")


async def test_finish(store: Store) -> None:
    ex = uid("ex")
    await _open(store, ex)
    done = await store.set_execution_status(ex, ExecutionStatus.FINISHED, "completed")
    assert (done.status, done.status_reason) == (ExecutionStatus.FINISHED, "completed")
    assert done.updated_at is not None


async def test_committed_spend_counts_every_hold_once_and_bills_the_expired(
    store: Store,
) -> None:
    """A run's grant reads spend plus holds: on PostgreSQL a live hold counts as spent, an
    expired one is billed first (once, in full) and a settled one counts its bill; on SQLite
    (no holds in the ledger) it is the ledger spend, as before."""
    root = record()
    child = record(parent_id=root.id, root_id=root.id, budget_usd=Decimal(1))
    await store.create_conversation(root)
    await store.create_conversation(child)
    runs = [uid("ex") for _ in range(2)]
    for ex in runs:
        await store.open_execution(
            execution_id=ex,
            conversation_id=child.id,
            model="m",
            provider="p",
            cost_ceiling_usd=None,
        )
    await store.record_usage(runs[0], tokens_in=1, tokens_out=1, cost_usd=Decimal("0.10"))
    if not isinstance(store, SharedBudgetLedger):
        assert await committed_spend(store, child.id) == Decimal("0.10")
        return

    async def hold(ex: str, amount: str, lease_s: float) -> BudgetHold:
        held = BudgetHold(
            reservation_id=uid("r"),
            execution_id=ex,
            conversation_id=child.id,
            amount=Decimal(amount),
            tokens_in=5,
            tokens_out=7,
        )
        assert await store.reserve_budget(held, holder="h", lease_s=lease_s, admit=bool)
        return held

    live = await hold(runs[0], "0.50", 30)
    await hold(runs[1], "0.25", 0)  # its lease is over as soon as it is written
    assert await committed_spend(store, root.id) == Decimal("0.85")  # the root's subtree
    assert await committed_spend(store, child.id) == Decimal("0.85")
    billed = await store.get_execution(runs[1])
    assert (billed.cost_usd, billed.requests, billed.tokens_out) == (Decimal("0.25"), 1, 7)
    await store.settle_reservation(live, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.20"))
    assert await committed_spend(store, child.id) == Decimal("0.55")
