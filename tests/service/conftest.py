"""Boot the real service (store, gateway, MCP, bwrap sandbox, worktrees) around scripted models."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from synthorg.domain import Task
from synthorg.service.boot import Components
from synthorg.service.demo import DEMO_TASK, create_demo_repo
from tests import support
from tests.gitremote import daemon  # noqa: F401  (a git remote on loopback)
from tests.support import boot_real, scripted_settings

SCRIPTS = "synthorg.engine.native.scripts"
MODEL = "scripted-test"

Booter = Callable[..., AbstractAsyncContextManager[Components]]


@pytest.fixture
def booted(tmp_path: Path) -> Booter:
    """``async with booted(script, latency_ms=0) as components`` — a fully wired service."""

    @asynccontextmanager
    async def start(
        script: str, latency_ms: float = 0.0, **sections: dict[str, object]
    ) -> AsyncIterator[Components]:
        settings = scripted_settings(
            tmp_path / "home",
            script if ":" in script else f"{SCRIPTS}:{script}",
            model=MODEL,
            latency_ms=latency_ms,
            **sections,
        )
        async with boot_real(settings) as components:
            yield components

    return start


@pytest.fixture
def demo_repo(tmp_path: Path) -> Path:
    """The demo's sample repository (calc.py has a bug; test_calc.py fails)."""
    return create_demo_repo(tmp_path / "calc")


def make_task(repo: Path, prompt: str = DEMO_TASK, **fields: Any) -> Task:
    """A task on ``repo``."""
    return support.make_task(repo, prompt, **fields)
