"""`synthorg run --engine temporal` waits out a Temporal server that goes away mid-run: it
says it reconnects, and once the server is back it follows the run to its end."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from synthorg.service.demo import DEMO_TASK
from tests.distributed.conftest import TemporalServer, wait_ready
from tests.distributed.outcome import BUDGET_USD, PRICES, assert_landed_once
from tests.distributed.scripts import SLOW_COMMAND
from tests.distributed.support import TemporalWorld, slow_action, start_worker
from tests.faults.harness import Proc, synthorg

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address, extra_toml=PRICES)


async def _noticed(run: Proc) -> None:
    """Until the CLI says it reconnects, or it exits (what it did before)."""
    notice = run.watch("reconnecting")
    waiting = asyncio.ensure_future(notice.wait())
    exited = asyncio.ensure_future(run.proc.wait())
    await asyncio.wait({waiting, exited}, timeout=300, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    exited.cancel()
    assert notice.is_set(), f"no reconnect (rc {run.proc.returncode}):\n{run.output}"


@pytest.mark.timeout(900)
async def test_the_cli_follows_a_run_across_a_temporal_outage(
    world: TemporalWorld, temporal_server: TemporalServer
) -> None:
    worker = await start_worker(world)
    repo = world.repo("outage")
    run = await synthorg(
        world, "run", DEMO_TASK, "--repo", str(repo), "--loop", "react", "--model", "slow",
        "--budget", str(BUDGET_USD), "--engine", "temporal",
    )  # fmt: skip
    conversation = await run.conversation_id()
    await slow_action(world, conversation, SLOW_COMMAND)
    await asyncio.to_thread(temporal_server.stop)
    try:
        await _noticed(run)  # down until the CLI has seen it: not a blip its client retries
    finally:
        temporal_server.start()  # the same db and port
    await wait_ready(temporal_server.address)

    assert await run.exit(timeout=400) == 0, run.output + worker.output
    assert "completed" in run.output, run.output
    await assert_landed_once(world, conversation, repo, marks={})
    assert worker.proc.returncode is None
