"""`synthorg worker --health`: a worker's own health signal (it serves no HTTP), fresh while
its store answers and its pollers run; stale once it is cut off from the store or frozen."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.distributed.conftest import TemporalServer
from tests.distributed.support import TemporalWorld, start_worker
from tests.faults.harness import synthorg
from tests.faults.proxy import Proxy

pytestmark = [pytest.mark.postgres, pytest.mark.faults]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address)


async def _until_health(world: TemporalWorld, env: dict[str, str], *, healthy: bool) -> str:
    """Ask `synthorg worker --health` until it answers ``healthy`` (bounded); its output."""
    answers: list[str] = []
    async with asyncio.timeout(180):
        while True:
            probe = await synthorg(world, "worker", "--health", env=env)
            code = await probe.exit(timeout=60)
            answers.append(f"rc {code}: {probe.output}")
            if code == (0 if healthy else 1):
                return probe.output
            assert code in (0, 1), answers


@pytest.mark.timeout(600)
async def test_a_worker_is_healthy_until_cut_off_or_frozen(
    world: TemporalWorld, tmp_path: Path
) -> None:
    proxy = Proxy()
    await proxy.start()
    try:
        env = {
            "SYNTHORG__STORE__URL": world.store_url.replace(":5432/", f":{proxy.port}/"),
            "SYNTHORG__DISTRIBUTED__HEALTH_FILE": str(tmp_path / "worker-health.json"),
        }
        worker = await start_worker(world, env=env)
        assert "healthy" in await _until_health(world, env, healthy=True)

        proxy.freeze()  # its store goes silent
        assert "unhealthy" in await _until_health(world, env, healthy=False)
        proxy.thaw()
        await _until_health(world, env, healthy=True)

        os.kill(worker.proc.pid, signal.SIGSTOP)  # frozen: nothing renews the file
        try:
            assert "last healthy" in await _until_health(world, env, healthy=False)
        finally:
            os.kill(worker.proc.pid, signal.SIGCONT)
        await _until_health(world, env, healthy=True)
        assert worker.proc.returncode is None
    finally:
        await proxy.stop()
