"""The store fails under a live run: PostgreSQL stalled or gone, SQLite locked, read-only, full.

Each time the run must end within its bounded wait with one clear line naming the store and
what to do (no traceback), and once the store is back, `--resume` must finish the task.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.faults.harness import Proc, World, finish, no_traceback, resume, start_fix
from tests.faults.proxy import Proxy

pytestmark = [pytest.mark.faults, pytest.mark.bwrap]

BOUNDED_S = 240.0  # generous for a loaded machine; a hang would be forever
_TIGHT_PG = "connect_timeout_s = 2\nstatement_timeout_s = 3\npool_timeout_s = 3\n"


async def _acting(world: World, name: str) -> tuple[Proc, str, Path]:
    """A fix run that has started acting (its first tool call is in the log)."""
    repo = world.repo(name)
    run = await start_fix(world, repo)
    acting = run.watch("▶ ")
    conversation = await run.conversation_id()
    await asyncio.wait_for(acting.wait(), 300)
    return run, conversation, repo


async def _ends_clearly(run: Proc, *needles: str) -> float:
    """The run ends (bounded) with a clear error naming the problem; seconds it took."""
    started = time.monotonic()
    code = await run.exit(BOUNDED_S)
    took = time.monotonic() - started
    assert code == 2, run.output
    flat = " ".join(run.output.split())
    assert all(n in flat for n in needles), run.output
    assert "synthorg run --resume" in flat, run.output
    no_traceback(run.output)
    return took


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    relay = Proxy()
    await relay.start()
    try:
        yield relay
    finally:
        await relay.stop()


@pytest.mark.postgres
async def test_postgres_frozen_then_thawed(tmp_path: Path, pg_schema: str, proxy: Proxy) -> None:
    url = pg_schema.replace(":5432/", f":{proxy.port}/")
    world = World(tmp_path, url, _TIGHT_PG)
    run, conversation, repo = await _acting(world, "r")
    proxy.freeze()
    took = await _ends_clearly(run, "PostgreSQL store")
    # A frozen server stalls open connections and times out new ones: either is said.
    assert "stalled" in run.output or "unreachable" in run.output, run.output
    print(f"frozen PostgreSQL: the run ended after {took:.1f} s")
    proxy.thaw()
    await proxy.close_pipes()  # the held connections of the dead process
    await finish(world, conversation, repo)


@pytest.mark.postgres
async def test_postgres_killed_then_restored(tmp_path: Path, pg_schema: str, proxy: Proxy) -> None:
    url = pg_schema.replace(":5432/", f":{proxy.port}/")
    world = World(tmp_path, url, _TIGHT_PG)
    run, conversation, repo = await _acting(world, "r")
    await proxy.kill()
    took = await _ends_clearly(run, "PostgreSQL store")
    print(f"vanished PostgreSQL: the run ended after {took:.1f} s")
    await proxy.start()
    await finish(world, conversation, repo)


_LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
"""


async def test_sqlite_locked_by_another_process(tmp_path: Path) -> None:
    store = tmp_path / "store" / "store.db"
    world = World(tmp_path, str(store), "busy_timeout_s = 2\n")
    run, conversation, repo = await _acting(world, "r")
    locker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _LOCKER,
        str(store),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert locker.stdout is not None
        assert await asyncio.wait_for(locker.stdout.readline(), 120) == b"locked\n"
        await _ends_clearly(run, "is locked by another process", str(store))
    finally:
        assert locker.stdin is not None
        locker.stdin.close()
        await locker.wait()
    await finish(world, conversation, repo)


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@pytest.fixture
def store_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory for the store that the test may mount over; unmounted afterwards."""
    path = tmp_path / "store"
    path.mkdir()
    yield path
    while subprocess.run(["mountpoint", "-q", str(path)], check=False).returncode == 0:
        subprocess.run(["umount", "-l", str(path)], check=True)


async def test_sqlite_read_only(tmp_path: Path, store_dir: Path) -> None:
    world = World(tmp_path, str(store_dir / "store.db"))
    run, conversation, repo = await _acting(world, "r")
    run.proc.kill()
    await run.exit()
    # Root ignores file modes: a read-only bind mount is what makes the store read-only.
    _mount("--bind", str(store_dir), str(store_dir))
    _mount("-o", "remount,bind,ro", str(store_dir))
    refused = await resume(world, conversation)
    await _ends_clearly(refused, str(store_dir / "store.db"))
    assert "read-only" in refused.output or "cannot be opened" in refused.output
    subprocess.run(["umount", str(store_dir)], check=True)
    await finish(world, conversation, repo)


async def test_sqlite_disk_full(tmp_path: Path, store_dir: Path) -> None:
    _mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(store_dir))
    world = World(tmp_path, str(store_dir / "store.db"))
    run, conversation, repo = await _acting(world, "r")
    filler = store_dir / "filler"
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 65536)
        except OSError:
            pass  # the disk is full
    await _ends_clearly(run, "is full", str(store_dir / "store.db"))
    filler.unlink()
    await finish(world, conversation, repo)
