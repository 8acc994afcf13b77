"""Cancellation of a bill waiting for its fsync, admit callbacks that raise, and failures
between BEGIN and COMMIT on write_now's connection: billed once, nothing half-written, and the
in-flight holds (``_in_flight``) back where they were."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest

from synthorg.store.protocol import BudgetFigures
from synthorg.store.sqlite import SqliteStore
from tests.store.redteam_write_now.rt_ledger import new_hold, run_with_ceiling


def _count(path: Path, sql: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


class _BlockedFsync:
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()
        self.real = os.fsync

    def __call__(self, fd: int) -> None:
        self.entered.set()
        self.release.wait(60)
        self.real(fd)
        self.done.set()


async def _bill_cancelled_in_its_fsync(
    store: SqliteStore, execution: str, conversation: str, blocked: _BlockedFsync, *, alone: bool
) -> asyncio.Task[object]:
    """A held request's bill (with another request in flight unless ``alone``), cancelled
    once its fsync has started (and is held by ``blocked``)."""
    hold = new_hold(execution, conversation, Decimal("0.10"))
    assert await store.reserve_budget(hold, holder="h", lease_s=60, admit=bool)
    if not alone:  # a second request in flight: the bill goes through the writer thread
        other = new_hold(execution, conversation, Decimal("0.10"))
        assert await store.reserve_budget(other, holder="h", lease_s=60, admit=bool)
    bill: asyncio.Task[object] = asyncio.create_task(
        store.settle_reservation(hold, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.04"))
    )
    assert await asyncio.to_thread(blocked.entered.wait, 60)
    bill.cancel()
    return bill


@pytest.mark.parametrize("alone", [True, False])
async def test_a_bill_cancelled_while_its_fsync_runs_is_billed_once_and_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alone: bool
) -> None:
    path = tmp_path / "s.db"
    store, execution, conversation = await run_with_ceiling(path, None)
    blocked = _BlockedFsync()
    monkeypatch.setattr(os, "fsync", blocked)
    try:
        bill = await _bill_cancelled_in_its_fsync(
            store, execution, conversation, blocked, alone=alone
        )
        with pytest.raises(asyncio.CancelledError):
            await _after(bill, blocked)
        blocked.release.set()
        assert await asyncio.to_thread(blocked.done.wait, 60)
        row = await store.get_execution(execution)
        assert (row.requests, row.cost_usd) == (1, Decimal("0.04"))  # billed once
        expected = 0 if alone else 1
        assert len(store._in_flight()) == expected
    finally:
        blocked.release.set()
        await store.close()


async def _after(task: asyncio.Task[object], blocked: _BlockedFsync) -> object:
    # The fsync is let go a moment after the cancel (either unwinding order passes here).
    threading.Timer(0.2, blocked.release.set).start()
    return await asyncio.wait_for(asyncio.shield(task), 60)


async def test_a_cancelled_bill_run_here_unwinds_only_once_it_is_durable_as_submit_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_now claims to be ``submit(work, durable=False, synced=synced)`` on another
    thread. submit's cancelled caller, its job running, unwinds only once the job's future is
    answered: for a bill, after the fsync. write_now's returns while the fsync is pending."""
    path = tmp_path / "s.db"
    store, execution, conversation = await run_with_ceiling(path, None)
    blocked = _BlockedFsync()
    monkeypatch.setattr(os, "fsync", blocked)
    try:
        bill = await _bill_cancelled_in_its_fsync(
            store, execution, conversation, blocked, alone=True
        )
        threading.Timer(0.3, blocked.release.set).start()  # a fixed write_now waits for this
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(bill), 60)
        durable_when_unwound = blocked.done.is_set()
        blocked.release.set()
        assert durable_when_unwound, "the cancelled bill unwound before its WAL fsync"
    finally:
        blocked.release.set()
        await store.close()


class _Boom(BaseException):
    pass


@pytest.mark.parametrize(
    ("error", "alone"),
    [(LookupError, True), (LookupError, False), (_Boom, True), (_Boom, False)],
)  # (_Boom, False) killed the writer thread (its _commit caught Exception only): every later
#   write then hung
async def test_an_admit_that_raises_writes_nothing_and_gives_back_its_count(
    tmp_path: Path, error: type[BaseException], alone: bool
) -> None:
    path = tmp_path / "s.db"
    store, execution, conversation = await run_with_ceiling(path, None)
    try:
        expired = new_hold(execution, conversation, Decimal("0.30"))
        assert await store.reserve_budget(expired, holder="h", lease_s=-1, admit=bool)
        await store.settle_reservation(expired, tokens_in=0, tokens_out=0, cost_usd=Decimal(0))
        # A hold whose lease ran out, never settled: the next admission bills it (or, if that
        # admission fails, leaves it to the one after).
        dead = new_hold(execution, conversation, Decimal("0.25"))
        assert await store.reserve_budget(dead, holder="h", lease_s=-1, admit=bool)
        assert not store._in_flight()  # its lease is over: no longer counted in flight
        before = (await store.get_execution(execution)).requests
        if not alone:
            store._in_flight()["another"] = time.monotonic() + 60  # another one in flight

        def admit(_: BudgetFigures) -> bool:
            raise error("refused")

        with pytest.raises(error):
            await store.reserve_budget(
                new_hold(execution, conversation, Decimal("0.10")),
                holder="h",
                lease_s=60,
                admit=admit,
            )
        assert len(store._in_flight()) == (0 if alone else 1)
        store._in_flight().pop("another", None)
        row = await store.get_execution(execution)
        assert row.requests == before  # the expired hold's bill was rolled back with it
        assert _count(path, "SELECT count(*) FROM budget_reservations") == 1
        nxt = new_hold(execution, conversation, Decimal("0.10"))
        assert await store.reserve_budget(nxt, holder="h", lease_s=60, admit=bool)
        await store.settle_reservation(nxt, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.05"))
        row = await store.get_execution(execution)
        assert row.requests == before + 2  # the dead hold billed in full, once, plus this
        assert row.cost_usd == Decimal("0.30")
        assert not store._in_flight()
    finally:
        await store.close()


async def test_failures_between_begin_and_commit_leave_the_connection_usable(
    tmp_path: Path,
) -> None:
    from tests.store.test_sqlite_writer_cancel import _writer

    path, writer = await _writer(tmp_path)

    def dup(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('a')")
        conn.execute("CREATE TABLE t (v TEXT)")  # fails: exists (OperationalError)

    def half_cursor(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('b')")
        cur = conn.execute("SELECT v FROM t")  # a statement left open mid-result
        cur.fetchone()
        raise LookupError("after an open cursor")

    def ok(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO t VALUES ('ok')")
        return "ok"

    try:
        await writer.write_now(ok)
        for job in (dup, half_cursor):
            with pytest.raises(Exception):  # noqa: B017
                await writer.write_now(job)
            assert _count(path, "SELECT count(*) FROM t") == 1
            assert writer._here is not None and writer._here.in_transaction is False
        assert await writer.write_now(ok) == "ok"
        # the write lock is free: another connection can take it at once
        other = sqlite3.connect(path, isolation_level=None, timeout=0)
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        other.close()
        assert _count(path, "SELECT count(*) FROM t") == 2
    finally:
        await writer.close()


async def test_close_while_a_bill_run_here_waits_for_its_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.db"
    store, execution, conversation = await run_with_ceiling(path, None)
    blocked = _BlockedFsync()
    monkeypatch.setattr(os, "fsync", blocked)
    hold = new_hold(execution, conversation, Decimal("0.10"))
    assert await store.reserve_budget(hold, holder="h", lease_s=60, admit=bool)
    bill = asyncio.create_task(
        store.settle_reservation(hold, tokens_in=1, tokens_out=1, cost_usd=Decimal("0.04"))
    )
    assert await asyncio.to_thread(blocked.entered.wait, 60)
    closing = asyncio.create_task(store.close())
    threading.Timer(0.2, blocked.release.set).start()
    usage = await asyncio.wait_for(bill, 60)
    await asyncio.wait_for(closing, 60)
    assert blocked.done.is_set()
    assert usage.requests == 1 and usage.cost_usd == Decimal("0.04")
    with pytest.raises(Exception, match="closed"):
        await store.reserve_budget(
            new_hold(execution, conversation, Decimal("0.1")), holder="h", lease_s=60, admit=bool
        )
