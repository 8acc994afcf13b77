"""Suite-wide fixtures and rules: an isolated data dir; in CI a skip is a failure."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from synthorg.logging import configure_logging


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test gets its own SYNTHORG_HOME unless it sets one."""
    if "SYNTHORG_TEST_KEEP_HOME" not in os.environ:
        monkeypatch.setenv("SYNTHORG_HOME", str(tmp_path_factory.mktemp("home")))


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
