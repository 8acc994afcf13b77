"""A run_loop retry for a run that ended meanwhile returns its outcome: no second run.

The holder misses its heartbeat while closing the run (SIGSTOP while it stands at the close,
as a loaded worker would), so Temporal gives the attempt to another worker; that attempt
checks the conversation (still running) and waits there until the holder has landed the run
and let the conversation go. It must then not claim and run it again.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from synthorg.domain import ConversationStatus, StatusChangeEvent
from synthorg.faultpoints import GO_DIR_ENV, PAUSE_ENV
from synthorg.store import open_store
from tests.distributed.conftest import TemporalServer
from tests.distributed.outcome import PRICES, assert_landed_once
from tests.distributed.support import TemporalWorld, events_of, start_worker
from tests.distributed.test_stage_kills import paused, start_run

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    # The holder stays frozen until the retry has checked the conversation: under load that
    # takes longer than the default lease (2 x heartbeat), and the holder would then be swept
    # as dead and its run taken over (tests/distributed/test_zombie_fence.py's case, not this
    # one). A long lease keeps this test on the path it names.
    lease = "owner_lease_s = 300\n"  # a key of [distributed], the last table before PRICES
    return TemporalWorld(
        tmp_path, pg_schema, address=temporal_server.address, extra_toml=lease + PRICES
    )


async def _ended_and_let_go(world: TemporalWorld, conversation: str) -> None:
    store = await open_store(world.store_url)
    try:
        async with asyncio.timeout(300):
            while True:
                record = await store.get_conversation(conversation)
                owner = await store.conversation_owner(conversation)
                if record.status is ConversationStatus.FINISHED and owner is None:
                    return
                await asyncio.sleep(0.2)
    finally:
        await store.close()


@pytest.mark.timeout(900)
async def test_a_retry_of_an_ended_run_returns_its_outcome(
    world: TemporalWorld, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    go.mkdir()
    holder = await start_worker(world, env={PAUSE_ENV: "run-closing", GO_DIR_ENV: str(go)})
    closing = asyncio.ensure_future(paused(holder, "run-closing"))
    repo = world.repo("ended")
    run = await start_run(world, repo)
    conversation = await run.conversation_id()
    retrier = await start_worker(world, env={PAUSE_ENV: "run-retry-checked", GO_DIR_ENV: str(go)})
    await closing
    checked = asyncio.ensure_future(paused(retrier, "run-retry-checked"))
    os.kill(holder.proc.pid, signal.SIGSTOP)  # its heartbeat misses: the attempt moves on
    try:
        await checked
    finally:
        os.kill(holder.proc.pid, signal.SIGCONT)
    (go / "run-closing.go").touch()
    await _ended_and_let_go(world, conversation)
    (go / "run-retry-checked.go").touch()

    assert await run.exit(timeout=400) == 0, run.output + holder.output + retrier.output
    assert "completed" in run.output, run.output
    events = await events_of(world, conversation)
    starts = [
        e
        for e in events
        if isinstance(e, StatusChangeEvent) and e.new is ConversationStatus.RUNNING
    ]
    assert len(starts) == 1, starts  # never re-opened
    store = await open_store(world.store_url)
    try:
        executions = await store.executions_of(conversation)
    finally:
        await store.close()
    assert len(executions) == 1, executions
    await assert_landed_once(world, conversation, repo, marks={"marks.txt": 1})
