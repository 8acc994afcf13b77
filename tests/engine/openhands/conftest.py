"""End-to-end fixtures: the runtime built once (shared with tests/runtime), the real service."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from synthorg.runtime import OpenHandsRuntime
from synthorg.service.boot import Components
from synthorg.service.demo import create_demo_repo
from tests.runtime.conftest import openhands_runtime
from tests.support import boot_real

from .e2e_support import make_home, make_settings

__all__ = ["openhands_runtime"]

Booter = Callable[..., AbstractAsyncContextManager[Components]]


@pytest.fixture
def home(tmp_path: Path, openhands_runtime: OpenHandsRuntime) -> Path:
    return make_home(tmp_path, openhands_runtime.venv_path)


@pytest.fixture
def booted(home: Path) -> Booter:
    """``async with booted(script) as components`` — the real service over the real runtime."""

    @asynccontextmanager
    async def start(script: str, **sections: dict[str, Any]) -> AsyncIterator[Components]:
        settings = make_settings(home, script, **sections)
        async with boot_real(settings) as components:
            yield components

    return start


@pytest.fixture
def demo_repo(tmp_path: Path) -> Path:
    """calc.py has a bug; test_calc.py fails until it is fixed."""
    return create_demo_repo(tmp_path / "calc")
