"""A workflow names the repository: the worker applies the server's repository rule to it.

Anyone who can start workflows in the namespace can hand a worker a task; without the rule
the worker would work on any path it can read.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError

from synthorg.distributed.client import start_run
from synthorg.domain import Task, new_id
from synthorg.errors import NotFoundError
from synthorg.service.demo import create_demo_repo
from synthorg.service.options import RunOptions
from synthorg.store import open_store
from tests.distributed.conftest import TemporalServer
from tests.distributed.support import TemporalWorld, client_of, start_worker

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address)


def _git_state(repo: Path) -> str:
    """Every ref, the worktrees and the status: what a run would change."""
    return "\n".join(
        subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout
        for args in (["for-each-ref"], ["worktree", "list", "--porcelain"], ["status", "-s"])
    )


@pytest.mark.timeout(600)
async def test_a_workflow_naming_a_repository_outside_the_allowed_ones_is_refused(
    world: TemporalWorld,
) -> None:
    outside = create_demo_repo(world.root / "elsewhere" / "secret-project")
    before = _git_state(outside)
    await start_worker(world)
    client = await client_of(world)
    conversation = new_id("conv")
    task = Task(id=new_id("task"), project_id="default", prompt="fix", repository=str(outside))
    # Started by hand, as anyone with access to the namespace could.
    handle = await start_run(client, world.distributed(), conversation, task=task,
                             options=RunOptions(loop="react"))  # fmt: skip
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert "outside the allowed roots" in str(failed.value.cause.__cause__), failed.value.cause
    store = await open_store(world.store_url)
    try:
        with pytest.raises(NotFoundError):
            await store.get_conversation(conversation)
    finally:
        await store.close()
    assert _git_state(outside) == before
    assert not (world.home / "worktrees" / conversation).exists()
