"""A write lock taken by another process before write_now's connection is even opened: the
loop keeps ticking; the job queues and lands."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from tests.store.test_sqlite_writer_cancel import _writer


def _ins(conn: sqlite3.Connection) -> str:
    conn.execute("INSERT INTO t VALUES ('x')")
    return "ok"


@pytest.mark.parametrize("how", ["immediate"])
async def test_first_use_with_the_lock_taken_never_blocks_the_loop(
    tmp_path: Path, how: str
) -> None:
    path, writer = await _writer(tmp_path)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    if how == "exclusive_mode":
        other.execute("PRAGMA locking_mode=EXCLUSIVE")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t VALUES ('other')")
    loop = asyncio.get_running_loop()
    gaps: list[float] = []
    try:
        job = asyncio.create_task(writer.write_now(_ins, synced=True))
        last = loop.time()
        for _ in range(40):
            await asyncio.sleep(0.005)
            now = loop.time()
            gaps.append(now - last)
            last = now
        assert not job.done()
        other.execute("COMMIT")
        other.close()
        assert await asyncio.wait_for(job, 60) == "ok"
        assert await writer.write_now(_ins) == "ok"
    finally:
        await writer.close()
    assert max(gaps) < 1.0, max(gaps)
