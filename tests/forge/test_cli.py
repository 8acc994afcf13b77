"""The commands against a real `synthorg serve` process configured through [forge]:
`synthorg forge replay` signs and posts a saved delivery (a run starts; replayed with the same
id, nothing more), `synthorg forge status` lists what each delivery did; a serve whose forge
secret is missing refuses to start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.server.real_server import server_env, start_server, stop

from .conftest import DELIVERIES, SECRET_ENV

SYNTHORG = [sys.executable, "-m", "synthorg.cli.app"]
SECRET = "cli-secret-00112233445566778899"


def _env(home: Path, repo: Path) -> dict[str, str]:
    project = {
        "webhook_secret_env": SECRET_ENV,
        "repository": str(repo),
        "label": "bug",
        "model": "progress3",
    }
    return server_env(home) | {
        "SYNTHORG__FORGE__PROJECTS": json.dumps({"web": project}),
        SECRET_ENV: SECRET,
    }


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SYNTHORG, "forge", *args], env=env, capture_output=True, text=True, timeout=120
    )


async def test_replay_and_status_against_a_real_serve(tmp_path: Path, repo: Path) -> None:
    home = tmp_path / "home"
    env = _env(home, repo)
    log = tmp_path / "serve.log"
    proc, url = await start_server(home, log, env=env)
    try:
        delivery = str(DELIVERIES / "issues.labeled.json")
        args = ("replay", delivery, "--project", "web", "--url", url, "--delivery", "cli-1")
        first = _cli(env, *args)
        assert first.returncode == 0, first.stderr
        assert '"queued":true' in first.stdout.replace(" ", "")
        again = _cli(env, *args)
        assert again.returncode == 0 and '"duplicate":true' in again.stdout.replace(" ", "")
        wrong = _cli(env | {SECRET_ENV: "another-secret-000000000"}, *args[:-2])
        assert wrong.returncode == 1 and "401" in wrong.stdout
        from .conftest import until

        async def listed() -> str:
            return _cli(env | {"COLUMNS": "250"}, "status", "--project", "web").stdout

        table = await until(listed, lambda out: "started" in out, 120)
        assert "cli-1" in table and "issues.labeled" in table
    finally:
        stop(proc, log)


def test_a_serve_without_its_forge_secret_refuses_to_start(tmp_path: Path, repo: Path) -> None:
    home = tmp_path / "home"
    env = _env(home, repo)
    del env[SECRET_ENV]
    done = subprocess.run(
        [*SYNTHORG, "serve", "--port", "0"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert f"webhook_secret_env names {SECRET_ENV}" in done.stdout + done.stderr
