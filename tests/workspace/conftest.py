"""Fixtures for workspace tests: a hermetic git environment with an identity."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gitremote import daemon  # noqa: F401  (a git remote on loopback)
from tests.support import hermetic_git


@pytest.fixture(autouse=True)
def _hermetic_git(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No global or system git config, and an identity from the environment (CI may have none)."""
    hermetic_git(tmp_path_factory, monkeypatch)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A SynthOrg data dir for worktrees."""
    return tmp_path / "home"
