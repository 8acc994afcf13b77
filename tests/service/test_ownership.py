"""A run's claim on its conversation: heartbeat keeps it, a lost lease stops the run, every exit
path releases it; dead processes' run dirs are swept."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from synthorg.domain import AgentIdentity, ConversationRecord, Task, new_id
from synthorg.service.ownership import claim_run
from synthorg.service.rundirs import sweep_dead_run_dirs
from synthorg.store import RunClaimant, Store, open_store
from synthorg.store.errors import ConversationOwnedError, LeaseLostError
from synthorg.store.reconcile import claimant


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await open_store(tmp_path / "store.db")
    try:
        yield opened
    finally:
        await opened.close()


async def _conversation(store: Store) -> str:
    from datetime import UTC, datetime

    moment = datetime.now(UTC)
    record = ConversationRecord(
        id=new_id("conv"),
        task=Task(id=new_id("task"), project_id="p", prompt="x", repository="/r"),
        agent=AgentIdentity(id="a"),
        loop_type="react",
        model="m",
        created_at=moment,
        updated_at=moment,
    )
    await store.create_conversation(record)
    return record.id


async def test_the_heartbeat_keeps_the_claim_past_its_lease(store: Store) -> None:
    cid = await _conversation(store)
    ownership = await claim_run(store, cid, lease_s=0.3)
    renewed = asyncio.Event()

    async def body() -> None:
        first = await store.conversation_owner(cid)
        assert first is not None
        while True:  # wait for the evidence: a heartbeat moved the lease on
            now = await store.conversation_owner(cid)
            assert now is not None and not now.expired
            if now.heartbeat_at > first.heartbeat_at:
                renewed.set()
                return
            await asyncio.sleep(0.02)

    await ownership.hold(body())
    assert renewed.is_set()
    assert await store.conversation_owner(cid) is None  # released at the end


async def test_a_lost_lease_stops_the_run(store: Store) -> None:
    cid = await _conversation(store)
    ownership = await claim_run(store, cid, lease_s=0.3)
    thief = RunClaimant(owner_id="own-thief", host="elsewhere", pid=1)
    await store.claim_conversation(cid, thief, lease_s=600, displace=ownership.owner.owner_id)
    with pytest.raises(LeaseLostError, match="lost conversation"):
        await ownership.hold(asyncio.Event().wait())
    holder = await store.conversation_owner(cid)
    assert holder is not None and holder.owner_id == "own-thief"  # release did not touch it


@pytest.mark.parametrize("ending", ["error", "cancel"])
async def test_every_exit_path_releases(store: Store, ending: str) -> None:
    cid = await _conversation(store)
    ownership = await claim_run(store, cid)
    with pytest.raises(ConversationOwnedError):
        await claim_run(store, cid)
    started = asyncio.Event()

    async def body() -> None:
        started.set()
        if ending == "error":
            raise ValueError("the loop failed")
        await asyncio.Event().wait()

    task = asyncio.create_task(ownership.hold(body()))
    await started.wait()
    if ending == "cancel":
        task.cancel()
    with pytest.raises(ValueError if ending == "error" else asyncio.CancelledError):
        await task
    assert await store.conversation_owner(cid) is None
    again = await claim_run(store, cid)
    await again.release()


def test_dead_processes_run_dirs_are_swept(tmp_path: Path) -> None:
    root = tmp_path / "run"
    exited = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = root / exited.stdout.strip()
    alive = root / "1"
    mine = root / str(claimant().pid)
    for path in (dead, alive, mine, root / "not-a-pid"):
        path.mkdir(parents=True)
        (path / "gateway.sock").write_text("")
    assert sweep_dead_run_dirs(root) == [dead]
    assert not dead.exists() and alive.exists() and mine.exists()
