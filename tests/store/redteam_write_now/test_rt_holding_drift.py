"""One admitted request whose bill never comes (its answer lost): while its lease runs the
process counts it in flight (later lone requests queue to the writer thread); once the lease
is over it stops counting (found: an in-flight count it left high turned the fast path off for
good, +40% CPU per lone request). Money stays right: its hold is billed in full when its
lease ends."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from synthorg.store.sqlite_engine import SqliteWriter
from tests.store.redteam_write_now.rt_ledger import new_hold, run_with_ceiling


async def test_an_unsettled_hold_counts_in_flight_only_until_its_lease_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # CPU cost only
    store, execution, conversation = await run_with_ceiling(tmp_path / "s.db", None)
    where: list[str] = []
    real = SqliteWriter.write_now

    def spy(self: SqliteWriter, *a: Any, **kw: Any) -> Any:
        where.append("write_now")
        return real(self, *a, **kw)

    monkeypatch.setattr(SqliteWriter, "write_now", spy)

    async def lone(n: int) -> None:
        for _ in range(n):
            hold = new_hold(execution, conversation, Decimal("0.01"))
            assert await store.reserve_budget(hold, holder="h", lease_s=60, admit=bool)
            await store.settle_reservation(
                hold, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.01")
            )

    try:
        await lone(50)
        assert where.count("write_now") == 100
        lost = new_hold(execution, conversation, Decimal("0.50"))
        assert await store.reserve_budget(lost, holder="h", lease_s=60, admit=bool)
        # ... its request's answer is lost: never settled
        where.clear()
        await lone(20)
        assert where == []  # its lease runs: it may still be in flight
        store._in_flight()[lost.reservation_id] = 0.0  # its lease is over
        await lone(20)
        assert where.count("write_now") == 40 and not store._in_flight()
        row = await store.get_execution(execution)
        assert row.requests == 90 and row.cost_usd == Decimal("0.90")
    finally:
        await store.close()
