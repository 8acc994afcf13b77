"""Bills committed on the loop's connection and by the writer thread, concurrently: each is
answered only after an fsync that started after its commit (a row visible to a fresh reader
when the fsync started is in the WAL that fsync made durable)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from tests.store.test_sqlite_writer_cancel import _writer


async def test_every_bill_is_answered_after_an_fsync_covering_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, writer = await _writer(tmp_path)
    real = os.fsync
    lock = threading.Lock()
    durable = [0]  # highest rowid visible when a completed fsync started
    fsyncs = [0]

    def fsync(fd: int) -> None:
        reader = sqlite3.connect(path)
        try:
            seen = int(reader.execute("SELECT coalesce(max(rowid), 0) FROM t").fetchone()[0])
        finally:
            reader.close()
        real(fd)
        with lock:
            durable[0] = max(durable[0], seen)
            fsyncs[0] += 1

    monkeypatch.setattr(os, "fsync", fsync)

    def bill(conn: sqlite3.Connection) -> int:
        return int(conn.execute("INSERT INTO t VALUES ('bill') RETURNING rowid").fetchone()[0])

    late: list[tuple[int, int]] = []
    paths = {"here": 0, "queued": 0}

    async def caller(n: int) -> None:
        for i in range(150):
            if (n + i) % 2:
                rowid = await writer.write_now(bill, synced=True)
                paths["here"] += 1
            else:
                rowid = await writer.submit(bill, durable=False, synced=True)
                paths["queued"] += 1
            with lock:
                if rowid > durable[0]:
                    late.append((rowid, durable[0]))

    try:
        await asyncio.gather(*(caller(n) for n in range(6)))
    finally:
        await writer.close()
    print(paths, "fsyncs", fsyncs[0])
    assert not late, late[:5]
