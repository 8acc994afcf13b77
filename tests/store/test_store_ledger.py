"""The execution ledger: idempotent open, atomic usage under concurrency, killed stays killed."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from store_helpers import uid

from synthorg.errors import NotFoundError
from synthorg.store import ExecutionStatus, Store, open_store


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
