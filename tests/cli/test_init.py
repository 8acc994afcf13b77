"""`synthorg init`: a commented config that loads, names secrets by env var, never clobbers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from synthorg.cli.app import app
from synthorg.cli.init import CONFIG_NAME, project_id_for, validate_config
from synthorg.gateway.config import GatewayConfig
from synthorg.mcp.config import McpConfig
from synthorg.service.config import RunDefaults, SandboxSettings
from synthorg.settings import load_settings, section

runner = CliRunner()
SECRETS = {
    "OPENAI_API_KEY": "sk-init-test-openai-0123456789",
    "ANTHROPIC_API_KEY": "sk-ant-init-test-abcdef",
    "SYNTHORG_GIT_TOKEN": "ghp_inittesttoken000111",
    "SYNTHORG_FORGE_TOKEN": "ghp_inittestforge222333",
    "PGPASSWORD": "pg-init-test-password",
}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COLUMNS", "200")
    for name, value in SECRETS.items():  # present in the environment: must never be written
        monkeypatch.setenv(name, value)
    path = tmp_path / "my repo"
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "sub").mkdir()
    return path


def test_init_writes_a_commented_config_that_loads_and_holds_no_secret(repo: Path) -> None:
    result = runner.invoke(app, ["init", str(repo / "sub")])
    assert result.exit_code == 0, result.output
    written = repo / CONFIG_NAME
    assert f"wrote {written}" in result.output
    assert "synthorg doctor" in result.output  # the host checks ran
    text = written.read_text()
    for value in SECRETS.values():
        assert value not in text
    for needle in ("api_key_env", "budget_usd", "[sandbox.limits]", "confirm", "token_env"):
        assert needle in text
    settings = load_settings(written, env={})
    validate_config(written)
    assert section(settings, "run", RunDefaults).model == "scripted-demo"
    gateway = section(settings, "gateway", GatewayConfig)
    assert gateway.serves("scripted", "scripted-demo")
    assert section(settings, "sandbox", SandboxSettings).backend == "bwrap"
    project = section(settings, "mcp", McpConfig).projects[0]
    assert project.project_id == "my-repo"
    assert project.repository == repo.resolve()


def test_every_commented_example_is_valid_config_too(repo: Path) -> None:
    assert runner.invoke(app, ["init", "--no-check", str(repo)]).exit_code == 0
    lines = (repo / CONFIG_NAME).read_text().splitlines()
    enabled = [line[2:] if line.startswith("# ") else line for line in lines]
    examples = repo / "all-examples.toml"
    examples.write_text("\n".join(enabled) + "\n")
    validate_config(examples)
    settings = load_settings(examples, env={})
    openai = section(settings, "gateway", GatewayConfig).provider("openai")
    assert openai is not None and openai.api_key_env == "OPENAI_API_KEY"
    project = section(settings, "mcp", McpConfig).projects[0]
    assert project.git_token_env == "SYNTHORG_GIT_TOKEN"
    assert project.forge is not None and project.forge.token_env == "SYNTHORG_FORGE_TOKEN"
    assert "password" not in str(settings.sections["store"].get("url"))


def test_rerunning_init_leaves_an_existing_file_alone(repo: Path) -> None:
    target = repo / CONFIG_NAME
    target.write_text("# mine\n[run]\nmodel = 'x'\n")
    result = runner.invoke(app, ["init", "--no-check", str(repo)])
    assert result.exit_code == 0, result.output
    assert "left unchanged" in result.output
    assert target.read_text() == "# mine\n[run]\nmodel = 'x'\n"


def test_init_never_writes_through_a_symlink(repo: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    os.symlink(victim, repo / CONFIG_NAME)  # dangling: a write would create the victim
    result = runner.invoke(app, ["init", "--no-check", str(repo)])
    assert result.exit_code == 0, result.output
    assert not victim.exists()
    assert (repo / CONFIG_NAME).is_symlink()


def test_init_outside_a_repository_fails_and_writes_nothing(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    result = runner.invoke(app, ["init", "--no-check", str(plain)])
    assert result.exit_code == 2
    assert "git init" in result.output
    assert list(plain.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [("my repo", "my-repo"), ("..", "project"), ("ok.name_1", "ok.name_1"), ("-x-", "x")],
)
def test_project_id_is_a_safe_identifier(name: str, expected: str) -> None:
    assert project_id_for(Path("/r") / name) == expected
