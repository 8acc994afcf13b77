"""``SqliteWriter.write_now``: a budget job runs on the event loop's thread while the write lock
is free, and queues to the writer thread (never blocking the loop) while another connection
holds it; a bill run there is still answered only after an fsync of the WAL."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from synthorg.store.errors import StoreUnavailableError
from synthorg.store.sqlite_engine import SqliteWriter
from tests.store.test_sqlite_writer_cancel import _writer as started_writer


async def _writer(tmp_path: Path) -> tuple[Path, SqliteWriter]:
    return await started_writer(tmp_path)


def _insert_noting(threads: list[str]) -> Callable[[sqlite3.Connection], str]:
    def work(conn: sqlite3.Connection) -> str:
        threads.append(threading.current_thread().name)
        conn.execute("INSERT INTO t VALUES ('hold')")
        return "row"

    return work


def _rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])


async def test_a_free_lock_runs_the_job_here_and_a_taken_one_queues_it(tmp_path: Path) -> None:
    path, writer = await _writer(tmp_path)
    threads: list[str] = []
    try:
        assert await writer.write_now(_insert_noting(threads)) == "row"
        assert threads == [threading.current_thread().name]  # no hand-off
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
        queued = asyncio.create_task(writer.write_now(_insert_noting(threads)))
        loop = asyncio.get_running_loop()
        for _ in range(20):  # the loop goes on meanwhile: no tick waits for the lock
            before = loop.time()
            await asyncio.sleep(0.005)
            assert loop.time() - before < 5, "the event loop waited for the write lock"
        assert not queued.done() and len(threads) == 1  # queued behind the lock
        other.execute("COMMIT")
        other.close()
        assert await asyncio.wait_for(queued, timeout=60) == "row"
        assert threads[1].startswith("synthorg-sqlite-writer:")  # run by the writer thread
        assert _rows(path) == 2
    finally:
        await writer.close()


async def test_a_failed_job_here_writes_nothing_and_raises_its_error(tmp_path: Path) -> None:
    path, writer = await _writer(tmp_path)

    def half(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('half')")
        raise LookupError("refused after its first statement")

    try:
        with pytest.raises(LookupError, match="refused"):
            await writer.write_now(half)
        assert _rows(path) == 0
        assert await writer.write_now(_insert_noting([])) == "row"  # the connection is fine
        assert _rows(path) == 1
    finally:
        await writer.close()


async def test_a_bill_run_here_is_answered_only_after_the_wal_is_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, writer = await _writer(tmp_path)
    real = os.fsync
    go = threading.Event()
    synced: list[str] = []

    def fsync(fd: int) -> None:
        go.wait(60)
        real(fd)
        synced.append(threading.current_thread().name)

    monkeypatch.setattr(os, "fsync", fsync)
    try:
        bill = asyncio.create_task(writer.write_now(_insert_noting([]), synced=True))
        while _rows(path) < 1:  # committed (visible to every process) ...
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)
        assert not bill.done()  # ... but not answered before its fsync
        go.set()
        assert await asyncio.wait_for(bill, timeout=60) == "row"
        assert len(synced) == 1 and synced[0].startswith("synthorg-sqlite-sync:")
        assert await writer.write_now(_insert_noting([])) == "row"  # a hold: no fsync
        assert len(synced) == 1
    finally:
        go.set()
        await writer.close()


async def test_a_bill_run_here_whose_fsync_fails_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, writer = await _writer(tmp_path)

    def fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    try:
        with pytest.raises(StoreUnavailableError, match="could not sync its log"):
            await writer.write_now(_insert_noting([]), synced=True)
    finally:
        monkeypatch.undo()
        await writer.close()


async def test_a_lone_request_writes_here_and_concurrent_ones_through_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget's rule for where its writes run: the process's only request in flight holds
    and settles on the loop's thread; while others are in flight, through the writer thread
    (whose batch commits them together). Every hold and bill lands either way."""
    from decimal import Decimal

    from synthorg.store.protocol import BudgetHold
    from tests.store.redteam_write_now.rt_ledger import new_hold, run_with_ceiling

    store, execution, conversation = await run_with_ceiling(tmp_path / "store.db", None)
    where: list[str] = []
    for name in ("write_now", "submit"):
        real = getattr(SqliteWriter, name)

        def spy(
            self: SqliteWriter, *args: Any, _real: Any = real, _name: str = name, **kw: Any
        ) -> Any:
            where.append(_name)
            return _real(self, *args, **kw)

        monkeypatch.setattr(SqliteWriter, name, spy)
    try:

        def hold() -> BudgetHold:
            return new_hold(execution, conversation, Decimal("0.01"))

        async def request(held: BudgetHold) -> None:
            assert await store.reserve_budget(held, holder="h", lease_s=60, admit=bool)

        async def settle(held: BudgetHold) -> None:
            await store.settle_reservation(
                held, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.001")
            )

        lone = hold()
        where.clear()
        await request(lone)
        await settle(lone)
        assert where == ["write_now", "write_now"]

        first, second = hold(), hold()
        where.clear()
        await request(first)  # alone so far: here
        await request(second)  # the first is in flight: through the writer
        await settle(first)  # answered; the second is still in flight: through the writer
        await settle(second)  # the last in flight: here
        assert where == ["write_now", "submit", "submit", "write_now"]
        row = await store.get_execution(execution)
        assert row.requests == 3 and row.cost_usd == Decimal("0.003")
    finally:
        await store.close()
