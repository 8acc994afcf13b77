"""`synthorg sandbox boundary|check` through typer's runner, against the real backends."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from synthorg.cli.sandbox import app

runner = CliRunner()


@pytest.mark.bwrap
def test_check_proves_isolation_live() -> None:
    result = runner.invoke(app, ["check"])
    assert result.exit_code == 0, result.output
    assert "isolated" in result.output and "NOT isolated" not in result.output
    checked = (
        "uid",
        "/proc/sys",
        "seccomp",
        "core files",
        "/tmp size",
        "host paths",
        "worktree .git",
    )
    for boundary in checked:
        verdict = rf"^\s*{re.escape(boundary)}[\w ]*?\s+(holds|FAILS)\b"
        found = re.search(verdict, result.output, re.MULTILINE)
        assert found and found.group(1) == "holds", (boundary, result.output)
    assert "worktree quota" in result.output


def test_check_reports_the_local_backend_as_not_isolated() -> None:
    refused = runner.invoke(app, ["check", "--backend", "local"])
    assert refused.exit_code == 2 and "opt in explicitly" in refused.output
    result = runner.invoke(app, ["check", "--backend", "local", "--allow-local"])
    assert result.exit_code == 0 and "NOT isolated" in result.output
    # The control for the .git probe: unisolated, the file names the host dir and moves.
    assert re.search(r"^\s*worktree \.git\s+FAILS\b", result.output, re.MULTILINE), result.output
    assert "rename: allowed" in result.output, result.output


def test_boundary_as_json_and_unknown_backend() -> None:
    result = runner.invoke(app, ["boundary", "--backend", "local", "--allow-local", "--json"])
    assert result.exit_code == 0
    decl = json.loads(result.stdout)  # the loud local-backend warning goes to stderr
    assert decl["backend"] == "local" and len(decl["rows"]) == 6
    assert "unisolated" in result.stderr or "NO ISOLATION" in result.stderr.upper()
    unknown = runner.invoke(app, ["boundary", "--backend", "docker"])
    assert unknown.exit_code == 2 and "unknown sandbox backend" in unknown.output
