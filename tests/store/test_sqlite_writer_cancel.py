"""A caller cancelled while its write is being committed sees it committed when it unwinds.

The runner answers a cancelled run's open actions by reading the log right after the loop's
cancellation reached it. If an action's append was already being committed when the cancel
came, the append must not return (cancelled) before that commit: else the read misses the
action, the write lands afterwards, and the log keeps an action nobody answers (found by
the SIGKILL/SIGTERM campaign under load: an action without an observation).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from synthorg.store.sqlite_engine import SqliteWriter, connect


async def _writer(tmp_path: Path) -> tuple[Path, SqliteWriter]:
    """A database with one table and its started writer."""
    path = tmp_path / "w.db"
    setup = connect(path)
    setup.execute("CREATE TABLE t (v TEXT)")
    setup.commit()
    setup.close()
    writer = SqliteWriter(path, on_commit=lambda _: None)
    await writer.start()
    return path, writer


def _rows(path: Path) -> list[tuple[str]]:
    reader = connect(path)
    try:
        return reader.execute("SELECT v FROM t").fetchall()
    finally:
        reader.close()


async def test_a_cancelled_caller_unwinds_only_after_its_running_write_committed(
    tmp_path: Path,
) -> None:
    path, writer = await _writer(tmp_path)
    started, release = threading.Event(), threading.Event()

    def slow_insert(conn: sqlite3.Connection) -> None:
        started.set()
        release.wait(30)  # the commit is under way when the caller is cancelled
        conn.execute("INSERT INTO t VALUES ('action')")

    caller = asyncio.ensure_future(writer.submit(slow_insert))
    assert await asyncio.to_thread(started.wait, 30)
    caller.cancel()
    # Let the write finish only a moment after the cancel was delivered.
    threading.Timer(0.3, release.set).start()
    with pytest.raises(asyncio.CancelledError):
        await caller
    rows = _rows(path)  # read at once, as the runner does
    await writer.close()
    assert rows == [("action",)]


async def test_a_cancelled_caller_whose_write_had_not_started_writes_nothing(
    tmp_path: Path,
) -> None:
    path, writer = await _writer(tmp_path)
    started, release = threading.Event(), threading.Event()

    def blocker(conn: sqlite3.Connection) -> None:
        started.set()
        release.wait(30)

    def insert(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('queued')")

    first = asyncio.ensure_future(writer.submit(blocker))
    assert await asyncio.to_thread(started.wait, 30)
    queued = asyncio.ensure_future(writer.submit(insert))
    await asyncio.sleep(0)  # queued behind the blocker
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    release.set()
    await first
    await writer.close()
    assert _rows(path) == []
