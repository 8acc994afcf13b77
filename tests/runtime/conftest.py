"""Fixtures for runtime tests: the OpenHands runtime venv is built once and cached."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from synthorg.runtime import OpenHandsRuntime, build_runtime

# Read at import, before the suite-wide autouse fixture points SYNTHORG_HOME at a temp dir.
_OPERATOR_HOME = os.environ.get("SYNTHORG_HOME")


def runtime_home() -> Path:
    """The operator's ``SYNTHORG_HOME`` if set, else a per-user cache: build once per machine."""
    if _OPERATOR_HOME:
        return Path(_OPERATOR_HOME)
    return Path.home() / ".cache" / "synthorg-tests" / "home"


@pytest.fixture(scope="session")
def openhands_runtime() -> OpenHandsRuntime:
    lines: list[str] = []
    try:
        return build_runtime(runtime_home(), lines.append)
    except Exception as exc:  # keep pip's tail in the failure report
        raise AssertionError("runtime build failed:\n" + "\n".join(lines[-30:])) from exc
