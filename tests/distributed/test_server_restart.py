"""Restarting the Temporal server (same on-disk db) mid-run: the run goes on and lands."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from synthorg.service.demo import DEMO_TASK
from tests.distributed.conftest import TemporalServer, wait_ready
from tests.distributed.support import TemporalWorld, start_worker
from tests.distributed.test_failover import _slow_action
from tests.faults.harness import branch_tests_pass, check_log, synthorg

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address)


@pytest.mark.timeout(600)
async def test_a_temporal_restart_mid_run_loses_nothing(
    world: TemporalWorld, temporal_server: TemporalServer
) -> None:
    worker = await start_worker(world)
    repo = world.repo("restart")
    run = await synthorg(
        world,
        "run",
        DEMO_TASK,
        "--repo",
        str(repo),
        "--loop",
        "react",
        "--model",
        "slow",
        "--engine",
        "temporal",
    )
    conversation = await run.conversation_id()
    await _slow_action(world, conversation)  # the worker is inside the run's slow tool call
    await asyncio.to_thread(temporal_server.stop)
    temporal_server.start()  # the same db and port
    await wait_ready(temporal_server.address)
    assert await run.exit(timeout=300) == 0, run.output + worker.output
    await check_log(world, conversation)
    branch_tests_pass(repo, conversation)
    assert worker.proc.returncode is None
