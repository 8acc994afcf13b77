"""A dead worker loses nothing: SIGKILL it mid tool call, another worker resumes and lands."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from synthorg.domain import ConversationStatus, ObservationEvent, StatusChangeEvent
from synthorg.store import open_store
from tests.distributed.conftest import TemporalServer
from tests.distributed.support import (
    TemporalWorld,
    events_of,
    kill_holder,
    start_slow_run,
    start_worker,
)
from tests.faults.harness import branch_tests_pass, check_log

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address)


@pytest.mark.timeout(600)
async def test_sigkill_mid_tool_call_resumes_on_another_worker_and_lands(
    world: TemporalWorld,
) -> None:
    workers = list(await asyncio.gather(start_worker(world), start_worker(world)))
    repo, run, conversation, slow = await start_slow_run(world, "kill")
    holder = workers[await kill_holder(world, workers, conversation)]

    assert await run.exit(timeout=300) == 0, run.output + "".join(w.output for w in workers)
    await check_log(world, conversation)  # seqs contiguous, each action observed once, FINISHED
    branch_tests_pass(repo, conversation)
    events = await events_of(world, conversation)
    (answer,) = [e for e in events if isinstance(e, ObservationEvent) and e.action_id == slow]
    assert answer.non_retryable and "effect is unknown" in answer.content, answer
    starts = [
        e
        for e in events
        if isinstance(e, StatusChangeEvent) and e.new is ConversationStatus.RUNNING
    ]
    assert len(starts) == 2, starts  # the killed worker's run, then the successor's
    (survivor,) = [w for w in workers if w is not holder]
    assert survivor.proc.returncode is None


async def _until(world: TemporalWorld, conversation: str, matches: object) -> None:
    store = await open_store(world.store_url)
    try:
        async with asyncio.timeout(300):
            async for stored in store.tail(conversation):
                if callable(matches) and matches(stored.event):
                    return
    finally:
        await store.close()


@pytest.mark.timeout(600)
async def test_a_zombie_worker_cannot_write_or_spend_for_a_run_taken_over(
    world: TemporalWorld,
) -> None:
    workers = list(await asyncio.gather(start_worker(world), start_worker(world)))
    repo, run, conversation, slow = await start_slow_run(world, "zombie")
    store = await open_store(world.store_url)
    try:
        owner = await store.conversation_owner(conversation)
        first_execution = (await store.get_conversation(conversation)).execution_id
    finally:
        await store.close()
    assert owner is not None and first_execution is not None
    (zombie,) = [w for w in workers if w.proc.pid == owner.pid]
    os.kill(owner.pid, signal.SIGSTOP)  # frozen mid tool call: its sleep ends meanwhile
    try:
        # Temporal moves the activity after the heartbeat timeout; the successor takes the
        # conversation over once the frozen owner's lease has run out.
        await _until(
            world,
            conversation,
            lambda e: (
                isinstance(e, StatusChangeEvent)
                and e.new is ConversationStatus.RUNNING
                and e.old is ConversationStatus.INTERRUPTED
            ),
        )
    finally:
        os.kill(owner.pid, signal.SIGCONT)
    assert await run.exit(timeout=300) == 0, run.output + "".join(w.output for w in workers)
    await check_log(world, conversation)  # the zombie's late observation was refused
    branch_tests_pass(repo, conversation)
    store = await open_store(world.store_url)
    try:
        events = [s.event for s in await store.history(conversation, limit=10_000)]
        ledger = await store.get_execution(first_execution)
    finally:
        await store.close()
    (answer,) = [e for e in events if isinstance(e, ObservationEvent) and e.action_id == slow]
    assert "effect is unknown" in answer.content, answer  # the successor's, not the zombie's
    assert ledger.status.value == "killed" and "superseded" in ledger.status_reason
    assert zombie.proc.returncode is None  # alive, fenced, not crashed
