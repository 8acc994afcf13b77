"""SIGKILL and SIGTERM of a real `synthorg run` at seeded random points, then `--resume`.

Each conversation is killed again and again (a kill lands in the run or in a resume of it),
until it completes; every conversation must then have finished with the tests passing on its
branch and a sound log (see ``harness.check_log``). Several conversations run at once on one
data dir and store, so kills also land while other processes use the same database.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.faults.harness import (
    World,
    branch_tests_pass,
    check_log,
    no_traceback,
    resume,
    start_fix,
)

pytestmark = [pytest.mark.faults, pytest.mark.bwrap]

CI_KILLS = 20
SOAK_KILLS = 100
PARALLEL = 4


@dataclass
class Budget:
    """Kills left to inject, and what each one did (for the failure message)."""

    left: int
    log: list[str] = field(default_factory=list)


async def _window(world: World) -> float:
    """Seconds from the header to the end of an uninterrupted run (the kill window)."""
    repo = world.repo("calibrate")
    run = await start_fix(world, repo)
    conversation = await run.conversation_id()
    started = time.monotonic()
    assert await run.exit() == 0, run.output
    window = time.monotonic() - started
    await finish_check(world, conversation, repo)
    return window


async def finish_check(world: World, conversation: str, repo: Path) -> None:
    await check_log(world, conversation)
    branch_tests_pass(repo, conversation)


async def _chain(
    world: World, name: str, rng: random.Random, window: float, budget: Budget
) -> None:
    """One conversation, killed at random points until it completes, then checked."""
    repo = world.repo(name)
    run = await start_fix(world, repo)
    conversation = await run.conversation_id()
    while budget.left > 0:
        delay = rng.uniform(0.0, window)
        signum = rng.choice((signal.SIGKILL, signal.SIGTERM))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(run.proc.wait()), delay)
        if run.proc.returncode is not None:
            break  # it finished before this point
        budget.left -= 1
        run.proc.send_signal(signum)
        code = await run.exit()
        budget.log.append(f"{conversation} {signum.name} at +{delay:.2f}s -> exit {code}")
        if signum is signal.SIGTERM:
            no_traceback(run.output)
        assert code != 0 or "completed" in run.output, run.output
        dead = world.home / "run" / str(run.proc.pid)
        run = await resume(world, conversation)
        await run.conversation_id()
        # This process's boot swept what the killed one left in SYNTHORG_HOME/run.
        assert not dead.exists() or signum is signal.SIGTERM
    code = await run.exit()
    assert code == 0 and "completed" in run.output, run.output
    await finish_check(world, conversation, repo)


async def _campaign(world: World, seed: int, kills: int) -> Budget:
    rng = random.Random(seed)
    window = await _window(world)
    budget = Budget(left=kills)
    count = 0

    async def worker(w: int) -> None:
        nonlocal count
        while budget.left > 0:
            count += 1
            await _chain(world, f"c{w}-{count}", random.Random(rng.random()), window, budget)

    await asyncio.gather(*(worker(w) for w in range(PARALLEL)))
    return budget


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    if request.param == "sqlite":
        return World(tmp_path, str(tmp_path / "store" / "store.db"))
    url: str = request.getfixturevalue("pg_schema")
    return World(tmp_path, url)


@pytest.mark.timeout(1800)  # ~20 real runs and resumes, each booting a full CLI
async def test_kills_at_random_points_then_resume_finishes(world: World) -> None:
    budget = await _campaign(world, seed=14, kills=CI_KILLS)
    # Workers check the budget, then wait, then kill: two may take the last one (>= 20 kills).
    assert budget.left <= 0 and len(budget.log) >= CI_KILLS, budget.log


@pytest.mark.soak
@pytest.mark.timeout(7200)
async def test_soak_kills(world: World) -> None:
    budget = await _campaign(world, seed=1414, kills=SOAK_KILLS)
    assert budget.left <= 0 and len(budget.log) >= SOAK_KILLS, budget.log
