"""A frozen holder (SIGSTOP past the heartbeat timeout, SIGCONT after the takeover) leaves no
trace: its sandbox is stopped before the successor runs, and nothing it logs lands after the
successor's end (the hand-over message is fenced like every other write of the run)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import psutil
import pytest

from synthorg.domain import ConversationStatus, MessageEvent, StatusChangeEvent
from synthorg.service.demo import DEMO_TASK
from synthorg.store import open_store
from tests.distributed.conftest import TemporalServer
from tests.distributed.outcome import BUDGET_USD, PRICES, assert_landed_once
from tests.distributed.scripts import FROZEN_COMMAND
from tests.distributed.support import (
    TemporalWorld,
    events_of,
    slow_action,
    start_worker,
    taken_over,
)
from tests.faults.harness import Proc, synthorg

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]

HAND_OVER = "this worker stopped the run"
LET_GO = "DISTRIBUTED_RUN_LET_GO"


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address, extra_toml=PRICES)


def live_sandboxes_under(pid: int) -> list[int]:
    """The bwrap processes below ``pid`` that still run (a killed one stays a zombie entry
    until its frozen parent reaps it)."""
    return [
        p.pid
        for p in psutil.Process(pid).children(recursive=True)
        if "bwrap" in p.name() and p.status() != psutil.STATUS_ZOMBIE
    ]


async def _let_go(world: TemporalWorld, conversation: str, zombie: Proc) -> None:
    """Until the thawed zombie has dealt with losing the run: it says so, or it wrote."""
    async with asyncio.timeout(120):
        while LET_GO not in zombie.output:
            events = await events_of(world, conversation)
            if any(isinstance(e, MessageEvent) and HAND_OVER in e.text for e in events):
                return
            await asyncio.sleep(0.2)


@pytest.mark.timeout(900)
async def test_a_thawed_zombie_leaves_nothing_after_the_successor(world: TemporalWorld) -> None:
    workers = list(await asyncio.gather(start_worker(world), start_worker(world)))
    repo = world.repo("zombie")
    run = await synthorg(
        world, "run", DEMO_TASK, "--repo", str(repo), "--loop", "react", "--model", "frozen",
        "--budget", str(BUDGET_USD), "--engine", "temporal",
    )  # fmt: skip
    conversation = await run.conversation_id()
    await slow_action(world, conversation, FROZEN_COMMAND)  # the holder is inside the call
    store = await open_store(world.store_url)
    try:
        owner = await store.conversation_owner(conversation)
    finally:
        await store.close()
    assert owner is not None
    (zombie,) = [w for w in workers if w.proc.pid == owner.pid]
    assert live_sandboxes_under(owner.pid)
    os.kill(owner.pid, signal.SIGSTOP)
    try:
        await taken_over(world, conversation)
        # Stopped by the successor before its own run began: it cannot write on.
        assert live_sandboxes_under(owner.pid) == []
    finally:
        os.kill(owner.pid, signal.SIGCONT)
    assert await run.exit(timeout=400) == 0, run.output + "".join(w.output for w in workers)
    await _let_go(world, conversation, zombie)

    events = await events_of(world, conversation)
    (end,) = [
        i
        for i, e in enumerate(events)
        if isinstance(e, StatusChangeEvent) and e.new is ConversationStatus.FINISHED
    ]
    assert end == len(events) - 1, events[end:]  # nothing from the zombie after the end
    assert not any(isinstance(e, MessageEvent) and HAND_OVER in e.text for e in events)
    # The frozen call never finished: its late write is in no tree (marks: none).
    await assert_landed_once(world, conversation, repo, marks={"late.txt": 0})
    assert zombie.proc.returncode is None  # alive, fenced, not crashed
