"""`synthorg serve` as a real process for restart and kill tests: its environment, start (wait
until ready), graceful stop and SIGKILL, and an operator key in its data dir."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import httpx

from synthorg.server import KeyStore, Role
from tests.support import free_port, until_ready

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


def operator_headers(home: Path, *roles: Role) -> dict[str, str]:
    """Authorization headers of a new key (operator, plus ``roles``) in ``home``'s key file."""
    key = KeyStore(home / "server" / "keys.json").create("olga", {Role.OPERATOR, *roles})[1]
    return {"Authorization": f"Bearer {key}"}


def _spawn(
    port: int, home: Path, sink: Any, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from synthorg.cli.serve import app; app(prog_name='synthorg serve')",
            "--port",
            str(port),
        ],
        env=server_env(home) if env is None else env,
        stdout=subprocess.DEVNULL,
        stderr=sink,
    )


async def start_server(
    home: Path, log: Path, *, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """A started server over ``home`` (its stderr appended to ``log``) and its base URL;
    ``env`` replaces :func:`server_env`'s environment."""
    port = free_port()
    with log.open("ab") as sink:
        proc = _spawn(port, home, sink, env)
    url = f"http://127.0.0.1:{port}"

    def exited() -> str | None:
        return None if proc.poll() is None else log.read_text()[-3000:]

    # Up to 3 minutes: imports alone take 20 s on a loaded machine.
    if await until_ready(url, exited, 180.0):
        return proc, url
    proc.kill()
    raise AssertionError("server never became ready")


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM: a graceful stop (uvicorn re-raises the signal after its shutdown)."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) in (0, -signal.SIGTERM)
    assert log.read_text().count("SERVER_SHUTDOWN") >= 1


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL: the host dies mid-whatever."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


async def wait_for(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    """Poll ``check`` until it holds; AssertionError naming ``what`` after ``timeout``."""
    for _ in range(int(timeout / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition never held: {what}")


@asynccontextmanager
async def served_client(
    home: Path, log: Path, headers: dict[str, str], *, end: Literal["stop", "kill"] = "stop"
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a server started over ``home``; the server is stopped (or SIGKILLed) after."""
    proc, url = await start_server(home, log)
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            yield client
    finally:
        if end == "kill":
            kill(proc)
        else:
            stop(proc, log)


async def create_conversation(
    client: httpx.AsyncClient, repo: Path, model: str, **fields: Any
) -> dict[str, Any]:
    """POST a conversation on ``repo`` (prompt "write progress" unless given); its body."""
    request = {"repository": str(repo), "prompt": "write progress", "model": model, **fields}
    created = await client.post("/api/conversations", json=request)
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body
