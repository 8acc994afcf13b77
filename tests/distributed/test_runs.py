"""A run is a workflow (id = conversation id) whose activities run on a `synthorg worker`."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from synthorg.cli.app import app
from synthorg.distributed.client import start_run
from synthorg.errors import ConflictError
from synthorg.service.demo import DEMO_TASK
from tests.distributed.conftest import TemporalServer
from tests.distributed.support import TemporalWorld, client_of, start_worker
from tests.faults.harness import branch_tests_pass, check_log, synthorg

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address)


async def test_run_is_a_workflow_that_lands_and_cannot_start_twice(
    world: TemporalWorld,
) -> None:
    repo = world.repo("one")
    run = await synthorg(
        world, "run", DEMO_TASK, "--repo", str(repo), "--loop", "react", "--engine", "temporal"
    )
    conversation = await run.conversation_id()
    # No worker polls yet, so the workflow is certainly still open: a second start is refused.
    client = await client_of(world)
    with pytest.raises(ConflictError, match="already has an active run"):
        await start_run(client, world.distributed(), conversation)
    worker = await start_worker(world)
    # The operator's view: doctor sees the server and this worker polling the run queue.
    doctor = await synthorg(world, "doctor")
    await doctor.exit()
    name = worker.output.split("worker ", 1)[1].split(" ready", 1)[0]
    assert "temporal workers" in doctor.output and name in doctor.output, doctor.output
    assert await run.exit() == 0, run.output + worker.output
    assert "termination: completed" in run.output
    await check_log(world, conversation)
    branch_tests_pass(repo, conversation)
    described = await client.get_workflow_handle(conversation).describe()
    assert described.workflow_type == "SynthorgRun"
    assert described.status is not None and described.status.name == "COMPLETED"


def test_doctor_fails_loudly_when_temporal_is_unreachable(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "t.toml"
    config.write_text(f'[distributed]\nengine = "temporal"\naddress = "127.0.0.1:{port}"\n')
    result = CliRunner().invoke(app, ["doctor", "--config", str(config)], env={"COLUMNS": "250"})
    assert result.exit_code == 1, result.output
    assert "temporal" in result.output and f"127.0.0.1:{port}" in result.output
