"""Fixtures for sandbox tests: backends, a workspace, and a helper that runs a program inside."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from synthorg.sandbox import BwrapSandbox, LocalSandbox
from synthorg.sandbox.quota import ROOT_ENV


@pytest.fixture(scope="session")
def bwrap() -> BwrapSandbox:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    return BwrapSandbox()


@pytest.fixture(scope="session")
def local() -> LocalSandbox:
    return LocalSandbox(allow_unisolated=True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A worktree inside a fake data dir (siblings: other worktrees, keys)."""
    ws = tmp_path / "data" / "worktrees" / "run-a"
    ws.mkdir(parents=True)
    return ws


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """A host directory outside every sandbox; anything appearing in it ran on the host."""
    path = tmp_path / "markers"
    path.mkdir()
    return path


@pytest.fixture
def quotas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own quota root (the default one is shared by every run on the host)."""
    root = tmp_path / "quota"
    monkeypatch.setenv(ROOT_ENV, str(root))
    return root
