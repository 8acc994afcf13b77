"""Restarting the Temporal server (same on-disk db) mid-run: the run goes on and lands."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.distributed.conftest import TemporalServer, wait_ready
from tests.distributed.support import TemporalWorld, start_slow_run, start_worker
from tests.faults.harness import branch_tests_pass, check_log

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address)


@pytest.mark.timeout(600)
async def test_a_temporal_restart_mid_run_loses_nothing(
    world: TemporalWorld, temporal_server: TemporalServer
) -> None:
    worker = await start_worker(world)
    # Once the worker is inside the run's slow tool call.
    repo, run, conversation, _ = await start_slow_run(world, "restart")
    await asyncio.to_thread(temporal_server.stop)
    temporal_server.start()  # the same db and port
    await wait_ready(temporal_server.address)
    assert await run.exit(timeout=300) == 0, run.output + worker.output
    await check_log(world, conversation)
    branch_tests_pass(repo, conversation)
    assert worker.proc.returncode is None
