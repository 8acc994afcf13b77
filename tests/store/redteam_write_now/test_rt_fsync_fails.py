"""A lone request's bill whose WAL fsync fails: the settle raises, yet the bill is committed
(visible to every process); it is billed once (its hold is gone, so no expiry bills it again)
and the in-flight count is back to zero, so the next lone request takes the fast path."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import pytest

from synthorg.store.errors import StoreUnavailableError
from tests.store.redteam_write_now.rt_ledger import new_hold, run_with_ceiling


async def test_a_failed_fsync_bill_is_committed_and_billed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, execution, conversation = await run_with_ceiling(tmp_path / "s.db", None)
    try:
        hold = new_hold(execution, conversation, Decimal("0.50"))
        assert await store.reserve_budget(hold, holder="h", lease_s=-1, admit=bool)

        def broken(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fsync", broken)
        with pytest.raises(StoreUnavailableError):
            await store.settle_reservation(
                hold, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.10")
            )
        monkeypatch.undo()
        assert not store._in_flight()
        nxt = new_hold(execution, conversation, Decimal("0.50"))
        assert await store.reserve_budget(nxt, holder="h", lease_s=60, admit=bool)
        await store.settle_reservation(nxt, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.10"))
        row = await store.get_execution(execution)
        # the "failed" bill landed: 0.10, not the hold's 0.50 by expiry, and not twice
        assert (row.requests, row.cost_usd) == (2, Decimal("0.20"))
    finally:
        await store.close()
