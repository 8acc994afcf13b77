"""Every commit on write_now's NORMAL connection (lone requests): does the WAL stay bounded,
and where do the checkpoints run?"""

from __future__ import annotations

import os
import sqlite3
import time
from decimal import Decimal
from pathlib import Path

import pytest

from tests.store.redteam_write_now.rt_ledger import new_hold, run_with_ceiling
from tests.store.test_sqlite_writer_cancel import _writer


async def test_20k_inline_commits_keep_the_wal_bounded(tmp_path: Path) -> None:
    path, writer = await _writer(tmp_path)
    wal = Path(f"{path}-wal")
    biggest = 0
    grew_db_here = 0  # commits during which the main file changed: a checkpoint here (the loop)
    slowest = 0.0
    payload = "x" * 200

    def insert(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (?)", (payload,))

    try:
        for _ in range(20_000):
            before = os.stat(path).st_mtime_ns, os.stat(path).st_size
            t0 = time.perf_counter()
            await writer.write_now(insert)
            slowest = max(slowest, time.perf_counter() - t0)
            if (os.stat(path).st_mtime_ns, os.stat(path).st_size) != before:
                grew_db_here += 1
            biggest = max(biggest, wal.stat().st_size)
    finally:
        await writer.close()
    print(
        f"wal max {biggest} bytes; checkpoints on the loop thread {grew_db_here}; "
        f"slowest write_now {slowest * 1000:.1f} ms"
    )
    assert biggest < 8 * 1024 * 1024  # default autocheckpoint: ~1000 pages


async def test_lone_requests_keep_the_wal_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # speed only: the bill path is the same
    store, execution, conversation = await run_with_ceiling(tmp_path / "s.db", None)
    wal = Path(f"{tmp_path / 's.db'}-wal")
    biggest = 0
    try:
        for _ in range(3000):
            hold = new_hold(execution, conversation, Decimal("0.01"))
            assert await store.reserve_budget(hold, holder="h", lease_s=60, admit=bool)
            await store.settle_reservation(
                hold, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.01")
            )
            biggest = max(biggest, wal.stat().st_size)
        row = await store.get_execution(execution)
    finally:
        await store.close()
    print(f"wal max after 3000 lone requests: {biggest} bytes")
    assert row.requests == 3000 and row.cost_usd == Decimal("30.00")
    assert biggest < 8 * 1024 * 1024
