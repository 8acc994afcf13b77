"""A holder cut off from PostgreSQL (a frozen TCP proxy) while it still reaches Temporal: the
run moves to another worker and lands once, and the outcome is confirmed by a worker that can
read it (not by the cut-off one, which keeps the workflow's tasks)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from synthorg.faultpoints import GO_DIR_ENV, PAUSE_ENV
from tests.distributed.conftest import TemporalServer
from tests.distributed.outcome import PRICES, assert_landed_once
from tests.distributed.scripts import FROZEN_COMMAND
from tests.distributed.support import TemporalWorld, slow_action, start_worker, taken_over
from tests.distributed.test_stage_kills import paused, start_run
from tests.faults.proxy import Proxy

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address, extra_toml=PRICES)


# stage -> the pause point the holder stands at when cut off (None: inside the long call).
STAGES: dict[str, str | None] = {"tool": None, "gate": "run-closing"}


@pytest.mark.parametrize("stage", list(STAGES))
@pytest.mark.timeout(900)
async def test_a_holder_cut_off_from_the_store_does_not_fail_a_landed_run(
    world: TemporalWorld, tmp_path: Path, stage: str
) -> None:
    point = STAGES[stage]
    go = tmp_path / "go"
    go.mkdir()
    proxy = Proxy()
    await proxy.start()
    try:
        cut = world.store_url.replace("127.0.0.1:5432/", f"127.0.0.1:{proxy.port}/")
        assert cut != world.store_url
        env = {"SYNTHORG__STORE__URL": cut}
        if point is not None:
            env |= {PAUSE_ENV: point, GO_DIR_ENV: str(go)}
        # Alone at first: it takes the run and the workflow (whose tasks stick to it).
        holder = await start_worker(world, env=env)
        reached = asyncio.ensure_future(paused(holder, point)) if point else None
        repo = world.repo(stage)
        run = await start_run(world, repo, "frozen" if point is None else "marked")
        conversation = await run.conversation_id()
        if reached is not None:
            await reached
        else:
            await slow_action(world, conversation, FROZEN_COMMAND)
        other = await start_worker(world)
        proxy.freeze()  # the holder's store goes silent; Temporal still hears it
        if point is not None:
            await taken_over(world, conversation)
            (go / f"{point}.go").touch()  # the cut-off holder goes on from the gate

        assert await run.exit(timeout=600) == 0, run.output + holder.output + other.output
        assert "completed" in run.output and "(no commit)" not in run.output, run.output
        marks = {"late.txt": 0} if point is None else {"marks.txt": 1}
        await assert_landed_once(world, conversation, repo, marks=marks)
        assert holder.proc.returncode is None and other.proc.returncode is None
    finally:
        await proxy.stop()
