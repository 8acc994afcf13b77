"""A bill (``durable=False, synced=True``) is answered only once the WAL is fsynced.

The writer commits it without an fsync and goes on; the sync thread fsyncs the WAL, then
answers. An fsync that fails is the caller's error: the bill is not durable.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest

from synthorg.store.errors import StoreUnavailableError
from synthorg.store.sqlite_engine import SqliteWriter
from tests.store.test_sqlite_writer_cancel import _writer as started_writer


async def _writer(tmp_path: Path) -> SqliteWriter:
    return (await started_writer(tmp_path))[1]


def _insert(conn: sqlite3.Connection) -> str:
    conn.execute("INSERT INTO t VALUES ('bill')")
    return "row"


async def test_a_synced_bill_is_answered_after_an_fsync_of_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = await _writer(tmp_path)
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        real(fd)
        synced.append(threading.current_thread().name)

    monkeypatch.setattr(os, "fsync", fsync)
    try:
        assert await writer.submit(_insert, durable=False, synced=True) == "row"
        assert len(synced) == 1
        assert synced[0].startswith("synthorg-sqlite-sync:")  # not the writer's thread
        assert await writer.submit(_insert, durable=False) == "row"  # a hold: no fsync
        assert len(synced) == 1
    finally:
        await writer.close()


async def test_a_bill_whose_fsync_fails_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = await _writer(tmp_path)

    def fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    try:
        with pytest.raises(StoreUnavailableError, match="could not sync its log"):
            await writer.submit(_insert, durable=False, synced=True)
    finally:
        monkeypatch.undo()
        await writer.close()
