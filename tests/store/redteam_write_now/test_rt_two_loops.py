"""One store used by two event loops in two threads (5d28c6e's case): every hold and bill lands
once, write_now's connection is used by one thread only, and the in-flight count is exact."""

from __future__ import annotations

import asyncio
import sys
import threading
from decimal import Decimal
from pathlib import Path

import pytest

from synthorg.store.protocol import BudgetFigures
from tests.store.redteam_write_now.rt_ledger import new_hold, run_with_ceiling

N = 400


@pytest.fixture
def fast_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads interleave often (as under load)
    yield
    sys.setswitchinterval(old)


async def test_two_loops_share_one_store(tmp_path: Path, fast_switching: None) -> None:
    store, execution, conversation = await run_with_ceiling(tmp_path / "s.db", None)
    ran_here: dict[str, set[int]] = {"here": set()}
    start = threading.Barrier(2)

    def admit(_: BudgetFigures) -> bool:
        if not threading.current_thread().name.startswith("synthorg-sqlite"):
            ran_here["here"].add(threading.get_ident())
        return True

    async def requests() -> None:
        for _ in range(N):
            hold = new_hold(execution, conversation, Decimal("0.01"))
            assert await store.reserve_budget(hold, holder="h", lease_s=60, admit=admit)
            await store.settle_reservation(
                hold, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.01")
            )

    def other_thread() -> None:
        start.wait(30)
        asyncio.run(requests())

    thread = threading.Thread(target=other_thread)
    thread.start()
    try:
        await asyncio.to_thread(start.wait, 30)
        await requests()
        await asyncio.to_thread(thread.join, 120)
        row = await store.get_execution(execution)
        holding = len(store._in_flight())
    finally:
        await store.close()
    print("holding", holding, "threads that ran write_now work", len(ran_here["here"]))
    assert (row.requests, row.cost_usd) == (2 * N, Decimal("0.01") * 2 * N)
    assert len(ran_here["here"]) == 1  # one thread uses write_now's connection
    assert holding == 0, f"the in-flight count drifted to {holding}"
