"""SIGKILL of the worker holding a run at each stage (stopped there by a pause point, not by
timing): another worker finishes the run, which lands exactly once and tells the truth."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from synthorg.faultpoints import ANNOUNCE, PAUSE_ENV
from synthorg.service.demo import DEMO_TASK
from tests.distributed.conftest import TemporalServer
from tests.distributed.outcome import BUDGET_USD, PRICES, assert_landed_once
from tests.distributed.scripts import FROZEN_COMMAND
from tests.distributed.support import TemporalWorld, slow_action, start_worker
from tests.faults.harness import Proc, synthorg

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address, extra_toml=PRICES)


async def start_run(world: TemporalWorld, repo: Path, model: str = "marked") -> Proc:
    """``synthorg run --engine temporal`` of the demo task on ``model`` (marking by default),
    within the fault runs' ceiling."""
    return await synthorg(
        world, "run", DEMO_TASK, "--repo", str(repo), "--loop", "react", "--model", model,
        "--budget", str(BUDGET_USD), "--engine", "temporal",
    )  # fmt: skip


async def paused(worker: Proc, point: str, timeout: float = 300.0) -> None:
    """Until ``worker`` says it stopped at ``point`` (registered before the run starts)."""
    event = worker.watch(f"{ANNOUNCE} {point}")
    waiting = asyncio.ensure_future(event.wait())
    exited = asyncio.ensure_future(worker.proc.wait())
    await asyncio.wait({waiting, exited}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    exited.cancel()
    waiting.cancel()
    assert event.is_set(), f"never paused at {point}; output:\n{worker.output}"


# stage -> the pause point the holder is killed at (None: inside the long tool call).
STAGES: dict[str, str | None] = {
    "prepare": "worktree-registered",  # git registered the worktree, its files not yet out
    "sandbox": "sandbox-started",  # the run's sandbox is up, nothing asked of the model yet
    "tool": None,  # inside a tool call (answered "effect unknown", never re-run)
    "gate": "run-closing",  # the model said finish; the work is not landed yet
    # The sandbox's teardown unbound its quota image, its work not yet copied back (a big
    # tree makes this window long): only the dead worker's image holds the work.
    "copy-back": "quota-unbound",
    "confirm": "confirm-landing",  # landed; the workflow reads the outcome back
}


@pytest.mark.parametrize("stage", list(STAGES))
@pytest.mark.timeout(900)
async def test_sigkill_of_the_holder_at_each_stage_loses_nothing(
    world: TemporalWorld, stage: str
) -> None:
    point = STAGES[stage]
    first = await start_worker(world, env={PAUSE_ENV: point} if point else None)
    watched = asyncio.ensure_future(paused(first, point)) if point else None
    repo = world.repo(stage)
    model = "frozen" if point is None else "marked"
    run = await start_run(world, repo, model)
    conversation = await run.conversation_id()
    if watched is not None:
        await watched
    else:
        await slow_action(world, conversation, FROZEN_COMMAND)
    second = await start_worker(world)  # only now: the first one takes the stage
    os.kill(first.proc.pid, signal.SIGKILL)
    await first.exit()

    assert await run.exit(timeout=400) == 0, run.output + second.output
    assert "completed" in run.output and "(no commit)" not in run.output, run.output
    marks = {"late.txt": 0} if point is None else {"marks.txt": 1}
    await assert_landed_once(world, conversation, repo, marks=marks)
    assert second.proc.returncode is None
