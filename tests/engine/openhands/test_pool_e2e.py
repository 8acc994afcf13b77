"""A pooled sandbox serves one real OpenHands run (the SDK imported before the run came), and
the run's mount table names no host location, as a cold-started one's does not."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from synthorg.domain import TerminationReason
from synthorg.runtime import OpenHandsRuntime
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.options import RunOptions

from .e2e_support import make_settings, make_task
from .test_redteam_mountinfo import SCRIPT

pytestmark = [pytest.mark.openhands, pytest.mark.bwrap, pytest.mark.slow, pytest.mark.timeout(900)]


async def test_a_pooled_sandbox_serves_one_openhands_run(
    demo_repo: Path, home: Path, openhands_runtime: OpenHandsRuntime
) -> None:
    async with boot(
        make_settings(home, SCRIPT),
        registry=default_registry(),
        provisioner=default_provisioner,
        openhands_pool="kept",
    ) as components:
        pool = components.sandbox_pool
        assert pool is not None and pool.size == 1  # the default
        await pool.settle()
        (slot,) = [s for slots in pool._idle.values() for s in slots]
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions(loop="openhands"))
        result = await service.run(record.id)
        assert pool.served == 1
        assert slot.process.exit is not None  # used once, then torn down
        await pool.settle()
        (replacement,) = [s for slots in pool._idle.values() for s in slots]
        assert replacement.process.pid != slot.process.pid and replacement.process.exit is None
    assert result.termination_reason is TerminationReason.COMPLETED, result.error
    assert result.branch is not None
    git = ["git", "-C", str(demo_repo), "show", f"{result.branch}:mountinfo.txt"]
    seen = subprocess.run(git, capture_output=True, text=True, check=True).stdout
    assert " /state " in seen and " /workspace " in seen and "/dev/loop" in seen, seen
    for secret in (str(home), record.id, "/openhands/", "/pool/", str(openhands_runtime.venv_path)):
        assert secret not in seen, (secret, seen)
    assert not (home / "openhands" / record.id).with_name(f"{record.id}.recovered").exists()
    assert any((home / "openhands" / record.id).rglob("base_state.json"))  # state came back
