"""A holder cut off from PostgreSQL (a frozen TCP proxy) while it still reaches Temporal: the
run moves to another worker and lands, and the outcome is confirmed by a worker that can read
it (not by the cut-off one, which keeps the workflow's tasks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.service.demo import DEMO_TASK
from tests.distributed.conftest import TemporalServer
from tests.distributed.outcome import BUDGET_USD, PRICES, assert_landed_once
from tests.distributed.scripts import FROZEN_COMMAND
from tests.distributed.support import TemporalWorld, slow_action, start_worker
from tests.faults.harness import synthorg
from tests.faults.proxy import Proxy

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address, extra_toml=PRICES)


@pytest.mark.timeout(900)
async def test_a_holder_cut_off_from_the_store_does_not_fail_a_landed_run(
    world: TemporalWorld,
) -> None:
    proxy = Proxy()
    await proxy.start()
    try:
        cut = world.store_url.replace("127.0.0.1:5432/", f"127.0.0.1:{proxy.port}/")
        assert cut != world.store_url
        # Alone at first: it takes the run and the workflow (whose tasks stick to it).
        holder = await start_worker(world, env={"SYNTHORG__STORE__URL": cut})
        repo = world.repo("cut")
        run = await synthorg(
            world, "run", DEMO_TASK, "--repo", str(repo), "--loop", "react",
            "--model", "frozen", "--budget", str(BUDGET_USD), "--engine", "temporal",
        )  # fmt: skip
        conversation = await run.conversation_id()
        await slow_action(world, conversation, FROZEN_COMMAND)
        other = await start_worker(world)
        proxy.freeze()  # the holder's store goes silent; Temporal still hears it

        assert await run.exit(timeout=600) == 0, run.output + holder.output + other.output
        assert "completed" in run.output and "(no commit)" not in run.output, run.output
        await assert_landed_once(world, conversation, repo, marks={"late.txt": 0})
        assert holder.proc.returncode is None and other.proc.returncode is None
    finally:
        await proxy.stop()
