"""The service's OpenHands wiring: registered, dispatched by loop type, loud without a runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.engine.openhands import OpenHandsUnavailableError
from synthorg.service.creation import NotOffered
from synthorg.service.demo import create_demo_repo
from synthorg.service.loops import default_registry
from synthorg.service.openhands import require_runtime, state_dir
from synthorg.service.options import RunOptions
from tests.support import boot_real

from .e2e_support import make_settings, make_task


def test_missing_runtime_tells_the_operator_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(OpenHandsUnavailableError, match="synthorg runtime build openhands"):
        require_runtime(tmp_path)
    assert state_dir(tmp_path, "conv-1") == tmp_path / "openhands" / "conv-1"


def test_registry_builds_openhands() -> None:
    registry = default_registry()
    assert {"react", "plan_execute", "hybrid", "openhands"} <= registry.buildable


async def test_a_run_without_the_runtime_fails_loud(tmp_path: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    settings = make_settings(tmp_path / "home", "openhands_fix_script")
    async with boot_real(settings) as c:
        with pytest.raises(NotOffered, match="not built") as refused:
            await c.service.create(make_task(repo), RunOptions(loop="openhands"))
        assert isinstance(refused.value.__cause__, OpenHandsUnavailableError)
        assert await c.store.count_conversations() == 0
