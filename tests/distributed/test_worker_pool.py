"""A `synthorg worker` keeps `[openhands] pool_size` sandboxes warm, as `serve` does: a run
the worker takes from Temporal is served by the sandbox started before it, which is then torn
down and replaced (one sandbox, one run)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from synthorg.runtime import OpenHandsRuntime
from synthorg.service.demo import DEMO_TASK
from tests.distributed.conftest import TemporalServer
from tests.distributed.support import READY_S, TemporalWorld, start_worker
from tests.engine.openhands.e2e_support import make_home
from tests.faults.harness import SCRIPT, branch_tests_pass, synthorg
from tests.runtime.conftest import openhands_runtime

__all__ = ["openhands_runtime"]

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.bwrap,
    pytest.mark.openhands,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]

OH_SCRIPT = "synthorg.engine.openhands.scripts:openhands_fix_script"


@dataclass(frozen=True)
class OpenHandsWorld(TemporalWorld):
    """The Temporal world, its default model scripted for the OpenHands loop."""

    @property
    def config(self) -> Path:
        path = super().config
        text = path.read_text()
        if OH_SCRIPT not in text:
            path.write_text(text.replace(SCRIPT, OH_SCRIPT))
        return path


@pytest.fixture
def world(
    tmp_path: Path,
    pg_schema: str,
    temporal_server: TemporalServer,
    openhands_runtime: OpenHandsRuntime,
) -> OpenHandsWorld:
    make_home(tmp_path, openhands_runtime.venv_path)  # the world's home holds the runtime
    return OpenHandsWorld(tmp_path, pg_schema, address=temporal_server.address)


def sandboxes(pid: int) -> set[int]:
    """The outer bwrap of each sandbox under the worker."""
    found = set()
    for proc in psutil.Process(pid).children(recursive=True):
        try:
            if "bwrap" in proc.name() and "bwrap" not in proc.parent().name():
                found.add(proc.pid)
        except psutil.NoSuchProcess:  # it exited while we looked
            continue
    return found


async def sandboxes_once(pid: int, gone: set[int]) -> set[int]:
    """The worker's sandboxes once there is one and none of ``gone`` is left."""
    async with asyncio.timeout(READY_S):
        while not (found := sandboxes(pid)) or found & gone:
            await asyncio.sleep(0.2)  # polling the process table: nothing to wait on
    return found


async def test_a_worker_runs_openhands_from_its_pool_and_keeps_one_warm(
    world: OpenHandsWorld,
) -> None:
    worker = await start_worker(world)
    (slot,) = await sandboxes_once(worker.proc.pid, set())  # started with no run in sight
    repo = world.repo("one")
    run = await synthorg(
        world, "run", DEMO_TASK, "--repo", str(repo), "--loop", "openhands", "--engine", "temporal"
    )
    assert await run.exit(600) == 0, run.output + worker.output
    assert "termination: completed" in run.output, run.output
    branch_tests_pass(repo, await run.conversation_id())
    # The waiting sandbox served the run (an idle one is torn down only at shutdown) and
    # another took its place.
    (replacement,) = await sandboxes_once(worker.proc.pid, {slot})
    assert replacement != slot
