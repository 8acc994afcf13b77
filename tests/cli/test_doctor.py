"""`synthorg doctor` and `--help` as an operator sees them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from synthorg.cli.app import app

runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SYNTHORG_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("run", "demo", "doctor", "conversations", "serve", "gateway", "mcp"):
        assert command in result.output


def test_doctor_reports_the_host_and_the_sandbox_table(home: Path) -> None:
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    for row in ("python", "git", "bubblewrap", "sandbox network", "sandbox resources", "store"):
        assert row in result.output
    assert "[bwrap]" in result.output
    assert "0 conversations" in result.output


def test_doctor_says_loudly_when_the_local_backend_is_on(home: Path, tmp_path: Path) -> None:
    config = tmp_path / "local.toml"
    config.write_text('[sandbox]\nbackend = "local"\nallow_local = true\n')
    result = runner.invoke(app, ["doctor", "--config", str(config)])
    assert "NO ISOLATION" in result.output
    assert "[local]" in result.output


def test_doctor_refuses_a_broken_config_clearly(home: Path, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[engine]\ndefault_loop_type = "magic"\n')
    result = runner.invoke(app, ["doctor", "--config", str(config)])
    assert result.exit_code == 2
    assert "unknown loop type 'magic'" in result.output


def test_doctor_flags_a_provider_that_over_reported(home: Path) -> None:
    """A run killed for its upstream's over-report (issue 30) names the provider in doctor."""
    import asyncio
    from decimal import Decimal

    from synthorg.store import open_store
    from synthorg.store.protocol import OVERREPORT, ExecutionStatus

    async def seed() -> None:
        store = await open_store(home / "store.db")
        try:
            for provider in ("liar", "honest"):
                await store.open_execution(
                    execution_id=f"exec-{provider}",
                    conversation_id="conv-1",
                    model="m",
                    provider=provider,
                    cost_ceiling_usd=Decimal(1),
                )
            await store.set_execution_status(
                "exec-liar", ExecutionStatus.KILLED, f"{OVERREPORT}: provider 'liar' reported..."
            )
            await store.set_execution_status("exec-honest", ExecutionStatus.KILLED, "operator")
        finally:
            await store.close()

    asyncio.run(seed())
    result = runner.invoke(app, ["doctor"])
    assert "provider liar" in result.output, result.output
    assert "1 run(s)" in result.output
    assert "provider honest" not in result.output


def test_doctor_says_what_confines_host_work_and_its_budget(home: Path, tmp_path: Path) -> None:
    config = tmp_path / "limits.toml"
    config.write_text("[limits]\nhost_work_cpu_s = 120\nhost_work_wall_s = 30\n")
    result = runner.invoke(app, ["doctor", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "host work" in result.output
    assert "120 CPU-s per run" in result.output and "30 s per step" in result.output
    assert "cgroup" in result.output or "RLIMIT_CPU" in result.output
