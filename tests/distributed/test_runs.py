"""A run is a workflow (id = conversation id) whose activities run on a `synthorg worker`."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.distributed.client import start_run
from synthorg.distributed.config import DistributedConfig
from synthorg.errors import ConflictError
from synthorg.service.demo import DEMO_TASK
from tests.distributed.conftest import TemporalServer
from tests.distributed.support import client_of, start_worker, temporal_world
from tests.faults.harness import World, branch_tests_pass, check_log, synthorg

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> World:
    return temporal_world(tmp_path, pg_schema, temporal_server.address)


async def test_run_is_a_workflow_that_lands_and_cannot_start_twice(
    world: World, temporal_server: TemporalServer
) -> None:
    repo = world.repo("one")
    run = await synthorg(
        world, "run", DEMO_TASK, "--repo", str(repo), "--loop", "react", "--engine", "temporal"
    )
    conversation = await run.conversation_id()
    # No worker polls yet, so the workflow is certainly still open: a second start is refused.
    client = await client_of(world, temporal_server.address)
    config = DistributedConfig(address=temporal_server.address, task_queue=_queue(world))
    with pytest.raises(ConflictError, match="already has an active run"):
        await start_run(client, config, conversation)
    worker = await start_worker(world)
    assert await run.exit() == 0, run.output + worker.output
    assert "termination: completed" in run.output
    await check_log(world, conversation)
    branch_tests_pass(repo, conversation)
    described = await client.get_workflow_handle(conversation).describe()
    assert described.workflow_type == "SynthorgRun"
    assert described.status is not None and described.status.name == "COMPLETED"


def _queue(world: World) -> str:
    line = next(x for x in world.store_extra.splitlines() if x.startswith("task_queue"))
    return line.split('"')[1]
