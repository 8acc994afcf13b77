"""Suite-wide fixtures and rules: an isolated data dir; in CI a skip is a failure."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from synthorg.logging import configure_logging


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test gets its own SYNTHORG_HOME unless it sets one."""
    if "SYNTHORG_TEST_KEEP_HOME" not in os.environ:
        monkeypatch.setenv("SYNTHORG_HOME", str(tmp_path_factory.mktemp("home")))


@pytest.fixture(scope="session", autouse=True)
def _settle_this_sessions_quotas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Quota images that hosts SIGKILLed by this session's tests left over its tmp dirs.

    Only a later start of the same data dir settles a dead host's quota (sandbox/quota.py),
    and a test's data dir never starts again: settled here, before pytest deletes the dirs
    (a mounted worktree cannot be deleted). Nothing outside this session's tmp is touched.
    """
    yield
    from synthorg.sandbox.quota import quota_root
    from synthorg.sandbox.quota_sweep import settle

    base = tmp_path_factory.getbasetemp().resolve()
    for entry in quota_root().glob("owner-*/*/record.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            if Path(json.loads(entry.read_text())["worktree"]).is_relative_to(base):
                settle(entry.parent)


@pytest.fixture(autouse=True)
def _default_logging() -> Iterator[None]:
    """CLI commands reconfigure process-wide logging (WARNING); every test starts from INFO."""
    configure_logging()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """In CI nothing may be skipped for a missing component: the machine must provide it."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (not allowed): {report.longrepr}"


@pytest.fixture
def repo_root() -> Path:
    """The checkout's root directory."""
    return Path(__file__).resolve().parents[1]


@pytest.fixture
def full_scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The index of every whole-tree scan (``SnapshotIndex._add_everything``), in order."""
    from synthorg.workspace import snapshot

    seen: list[str] = []
    real = snapshot.SnapshotIndex._add_everything

    async def spy(self: snapshot.SnapshotIndex, head: str | None, *args: Any) -> None:
        seen.append(self.path.name)
        await real(self, head, *args)

    monkeypatch.setattr(snapshot.SnapshotIndex, "_add_everything", spy)
    return seen


@pytest.fixture
def scan_roots(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Path, str]]:
    """(index name, tree read, asyncio task name) of every whole-tree ``git add -A``
    (``SnapshotIndex._add_everything_in``: the host's view, the run's, or the layer below
    its overlay), in order."""
    import asyncio

    from synthorg.workspace import snapshot

    seen: list[tuple[str, Path, str]] = []
    real = snapshot.SnapshotIndex._add_everything_in

    async def spy(self: snapshot.SnapshotIndex, root: Path, env: dict[str, str]) -> str:
        task = asyncio.current_task()
        seen.append((self.path.name, root, task.get_name() if task else ""))
        return await real(self, root, env)

    monkeypatch.setattr(snapshot.SnapshotIndex, "_add_everything_in", spy)
    return seen
