"""SIGSTOP of the holder at a stage, past the heartbeat timeout; SIGCONT once another worker
took the run over, and the zombie let go on: it lands nothing, logs nothing after the
successor's end, and the run lands exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from synthorg.domain import ConversationStatus, MessageEvent, StatusChangeEvent
from synthorg.faultpoints import GO_DIR_ENV, PAUSE_ENV
from tests.distributed.conftest import TemporalServer
from tests.distributed.outcome import PRICES, assert_landed_once
from tests.distributed.support import TemporalWorld, events_of, start_worker, taken_over
from tests.distributed.test_stage_kills import paused, start_run

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]

LET_GO = "DISTRIBUTED_RUN_LET_GO"
HAND_OVER = "this worker stopped the run"


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address, extra_toml=PRICES)


# stage -> the pause point the holder is frozen at. Not "copy-back" (frozen with its quota
# image unbound and its work not yet back): a live owner's quota keeps its lock, so the
# successor cannot settle it; see docs/architecture.md, Scale-out on Temporal.
STAGES = {"gate": "run-closing"}


@pytest.mark.parametrize("stage", list(STAGES))
@pytest.mark.timeout(900)
async def test_a_holder_frozen_at_each_stage_lands_nothing_after_the_takeover(
    world: TemporalWorld, tmp_path: Path, stage: str
) -> None:
    point = STAGES[stage]
    go = tmp_path / "go"
    go.mkdir()
    holder = await start_worker(world, env={PAUSE_ENV: point, GO_DIR_ENV: str(go)})
    reached = asyncio.ensure_future(paused(holder, point))
    repo = world.repo(stage)
    run = await start_run(world, repo)
    conversation = await run.conversation_id()
    await reached
    successor = await start_worker(world)
    os.kill(holder.proc.pid, signal.SIGSTOP)
    try:
        await taken_over(world, conversation)
    finally:
        os.kill(holder.proc.pid, signal.SIGCONT)
    (go / f"{point}.go").touch()  # the zombie goes on from where it stood

    assert await run.exit(timeout=400) == 0, run.output + holder.output + successor.output
    assert "completed" in run.output, run.output
    async with asyncio.timeout(120):
        while LET_GO not in holder.output:
            await asyncio.sleep(0.2)
    events = await events_of(world, conversation)
    ends = [
        i
        for i, e in enumerate(events)
        if isinstance(e, StatusChangeEvent) and e.new is ConversationStatus.FINISHED
    ]
    assert ends == [len(events) - 1], events[ends[0] if ends else 0 :]
    assert not any(isinstance(e, MessageEvent) and HAND_OVER in e.text for e in events)
    await assert_landed_once(world, conversation, repo, marks={"marks.txt": 1})
    assert holder.proc.returncode is None and successor.proc.returncode is None
