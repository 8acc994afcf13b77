"""``synthorg runtime status`` / ``build openhands`` through the typer sub-app."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from synthorg.cli.runtime import app
from synthorg.runtime import OpenHandsRuntime
from synthorg.runtime.openhands import lock_hash

runner = CliRunner()


def test_status_not_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTHORG_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "300")
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 0, result.output
    assert "not built" in result.output
    assert lock_hash() in result.output
    assert "synthorg runtime build openhands" in result.output


def test_build_rejects_unknown_runtime() -> None:
    result = runner.invoke(app, ["build", "docker"])
    assert result.exit_code != 0


@pytest.mark.openhands
def test_build_and_status_of_the_built_runtime(
    openhands_runtime: OpenHandsRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SYNTHORG_HOME", str(openhands_runtime.venv_path.parents[2]))
    monkeypatch.setenv("COLUMNS", "300")
    built = runner.invoke(app, ["build", "openhands"])
    assert built.exit_code == 0, built.output
    assert "already built" in built.output
    assert "ready" in built.output
    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    assert "built" in status.output and "not built" not in status.output
