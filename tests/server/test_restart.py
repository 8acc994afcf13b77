"""`synthorg serve` as a real process: killed with SIGKILL mid-tool-call, restarted, reconciled;
stopped with SIGTERM, its running conversation ends SHUTDOWN and is resumable."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from synthorg.server import KeyStore, Role
from tests.sandbox.helpers import sandboxes_in

from .conftest import free_port
from .helpers import events

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

HERE = Path(__file__).parent


def server_env(home: Path) -> dict[str, str]:
    """``synthorg serve`` over ``home`` with the scripted models; repositories allowed next to
    the data dir (the tests' repo fixture)."""
    providers = [
        {
            "name": "scripted",
            "kind": "scripted",
            "models": ["stuck", "slow50", "progress3"],
            "scripts": {
                "stuck": "real_scripts:stuck",
                "slow50": "real_scripts:slow50",
                "progress3": "real_scripts:progress3",
            },
        }
    ]
    return {
        **os.environ,
        "SYNTHORG_HOME": str(home),
        "PYTHONPATH": str(HERE),
        "SYNTHORG__GATEWAY__PROVIDERS": json.dumps(providers),
        "SYNTHORG__GATEWAY__PRICES": "{}",
        "SYNTHORG__RUN__MODEL": "stuck",
        "SYNTHORG__RUN__SHUTDOWN_GRACE_S": "0.5",
        "SYNTHORG__SANDBOX__BACKEND": "bwrap",
        "SYNTHORG__SERVER__REPOSITORY_ROOTS": json.dumps([str(home.parent / "project")]),
    }


def _spawn(port: int, home: Path, sink: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from synthorg.cli.serve import app; app(prog_name='synthorg serve')",
            "--port",
            str(port),
        ],
        env=server_env(home),
        stdout=subprocess.DEVNULL,
        stderr=sink,
    )


async def start_server(home: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with log.open("ab") as sink:
        proc = _spawn(port, home, sink)
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=url) as client:
        for _ in range(3600):  # up to 3 minutes: imports alone take 20 s on a loaded machine
            if proc.poll() is not None:
                raise AssertionError(f"server exited: {log.read_text()[-3000:]}")
            try:
                if (await client.get("/ready")).status_code == 200:
                    return proc, url
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    proc.kill()
    raise AssertionError("server never became ready")


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM: a graceful stop (uvicorn re-raises the signal after its shutdown)."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) in (0, -signal.SIGTERM)
    assert log.read_text().count("SERVER_SHUTDOWN") >= 1


@pytest.fixture
async def home(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "home"
    path.mkdir()
    yield path


async def wait_for(client: httpx.AsyncClient, cid: str, check: Any, timeout: float = 60) -> None:
    for _ in range(int(timeout / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition never held for {cid}")


def sandbox_processes(worktree: Path) -> list[psutil.Process]:
    return sandboxes_in(worktree)  # by host-side cwd: bwrap's command line names no host path


async def test_sigkill_mid_tool_call_then_restart_reconciles(
    home: Path, repo: Path, tmp_path: Path
) -> None:
    key = KeyStore(home / "server" / "keys.json").create("olga", {Role.OPERATOR})[1]
    headers = {"Authorization": f"Bearer {key}"}
    log = tmp_path / "server.log"
    proc, url = await start_server(home, log)
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            created = await client.post(
                "/api/conversations",
                json={"repository": str(repo), "prompt": "write progress", "model": "stuck"},
            )
            assert created.status_code == 201, created.text
            cid = created.json()["id"]
            worktree = Path(created.json()["workspace"]["path"])

            async def mid_tool_call() -> bool:
                # The command prints confirmed-1, then sleeps: the file is written, no result yet.
                actions = await events(client, cid, kind="action")
                observations = await events(client, cid, kind="observation")
                return bool(actions) and not observations and (worktree / "progress.txt").exists()

            await wait_for(client, cid, mid_tool_call)
            [action] = await events(client, cid, kind="action")
            action_id = action["event"]["action_id"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    # --die-with-parent: the sandbox of the killed server is gone too.
    for _ in range(100):
        if not sandbox_processes(worktree):
            break
        await asyncio.sleep(0.05)
    assert sandbox_processes(worktree) == []

    proc, url = await start_server(home, log)
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            body = (await client.get(f"/api/conversations/{cid}")).json()
            assert body["status"] == "interrupted" and "died" in body["error"]
            assert body["active"] is False
            log_after = await events(client, cid)
            observations = [e["event"] for e in log_after if e["event"]["kind"] == "observation"]
            assert [(o["action_id"], o["is_error"], o["non_retryable"]) for o in observations] == [
                (action_id, True, True)
            ]
            last = log_after[-1]["event"]
            assert last["kind"] == "status_change" and last["new"] == "interrupted"
            # Interrupted is resumable: a new run starts (and is cancelled here).
            resumed = await client.post(f"/api/conversations/{cid}/resume")
            assert resumed.status_code == 200
            cancel = await client.post(f"/api/conversations/{cid}/cancel")
            assert cancel.status_code in (200, 409)
    finally:
        stop(proc, log)


async def test_sigterm_stops_runs_with_shutdown_and_they_resume(
    home: Path, repo: Path, tmp_path: Path
) -> None:
    key = KeyStore(home / "server" / "keys.json").create("olga", {Role.OPERATOR})[1]
    headers = {"Authorization": f"Bearer {key}"}
    log = tmp_path / "server.log"
    proc, url = await start_server(home, log)
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            created = await client.post(
                "/api/conversations",
                json={"repository": str(repo), "prompt": "write progress", "model": "slow50"},
            )
            cid = created.json()["id"]

            async def working() -> bool:
                return len(await events(client, cid, kind="observation")) >= 2

            await wait_for(client, cid, working)
    finally:
        stop(proc, log)
    proc, url = await start_server(home, log)
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            body = (await client.get(f"/api/conversations/{cid}")).json()
            assert body["status"] == "paused" and body["termination_reason"] == "shutdown"
            done = len(await events(client, cid, kind="observation"))
            assert (await client.post(f"/api/conversations/{cid}/resume")).status_code == 200

            async def progressed() -> bool:
                return len(await events(client, cid, kind="observation")) > done

            await wait_for(client, cid, progressed)
            assert (await client.post(f"/api/conversations/{cid}/cancel")).status_code == 200
    finally:
        stop(proc, log)
