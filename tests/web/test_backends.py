"""The backend switcher: a second `synthorg serve` started by the test, reached from the first
server's console over CORS (its allow-list names the console's origin, never '*')."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from synthorg.server import KeyStore, Role, ServerSettings, create_app
from synthorg.service.runs import LocalRunService
from synthorg.store import Store
from tests.server.real_server import server_env
from tests.support import free_port

from .conftest import Keys
from .helpers import new_page, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.bwrap, pytest.mark.slow]


@contextlib.asynccontextmanager
async def serve_on(app: FastAPI, port: int) -> AsyncIterator[str]:
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def start_remote(home: Path, port: int, cors: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**server_env(home), "SYNTHORG__SERVER__CORS_ORIGINS": json.dumps([cors])}
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from synthorg.cli.serve import app; app(prog_name='synthorg serve')",
                "--port",
                str(port),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        for _ in range(3600):
            if proc.poll() is not None:
                raise AssertionError(f"remote exited: {log.read_text()[-3000:]}")
            try:
                if (await client.get("/ready")).status_code == 200:
                    return proc
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    proc.kill()
    raise AssertionError("remote never became ready")


async def test_switch_between_two_servers(
    settings: ServerSettings,
    store: Store,
    service: LocalRunService,
    key_store: KeyStore,
    keys: Keys,
    repo: Path,
    tmp_path: Path,
    chrome: Any,
) -> None:
    port_a, port_b = free_port(), free_port()
    origin_a, origin_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    remote_home = tmp_path / "remote"
    remote_home.mkdir()
    rita, remote_key = KeyStore(remote_home / "server" / "keys.json").create(
        "rita", {Role.OPERATOR}
    )
    remote = await start_remote(remote_home, port_b, origin_a, tmp_path / "remote.log")
    app = create_app(
        settings.model_copy(update={"console_backends": (origin_b,)}),
        store=store,
        run_service=service,
        auth=key_store,
    )
    try:
        async with serve_on(app, port_a) as url:
            for base, key, prompt in (
                (url, keys.operator, "task on A"),
                (origin_b, remote_key, "task on B"),
            ):
                async with httpx.AsyncClient(
                    base_url=base, headers={"Authorization": f"Bearer {key}"}
                ) as client:
                    created = await client.post(
                        "/api/conversations",
                        json={"repository": str(repo), "prompt": prompt, "start": False},
                    )
                    assert created.status_code == 201, created.text
            # CORS: B answers A's origin, and nobody else's.
            async with httpx.AsyncClient(base_url=origin_b) as client:
                allowed = await client.get("/health", headers={"Origin": origin_a})
                other = await client.get("/health", headers={"Origin": "http://evil.test"})
            assert allowed.headers["access-control-allow-origin"] == origin_a
            assert "access-control-allow-origin" not in other.headers

            page = await new_page(chrome, url)
            await sign_in(page, keys.operator)
            await page.wait_for_selector("td.task a:has-text('task on A')")
            await page.wait_for_selector(
                f"#backend option:has-text('{origin_b} (ok)')", state="attached"
            )
            await page.select_option("#backend", origin_b)
            await page.fill("#backend-key", remote_key)
            await page.click("#backend-key-form button[type=submit]")
            await page.wait_for_selector("#backend-principal:has-text('as rita')")
            await page.wait_for_selector("td.task a:has-text('task on B')")
            assert await page.locator("td.task a:has-text('task on A')").count() == 0
            # The remote conversation opens and streams from B.
            await page.click("td.task a:has-text('task on B')")
            await page.wait_for_selector("#conn.live")
            await page.wait_for_selector("#conv-title:has-text('task on B')")
            stored = await page.evaluate(
                "() => JSON.stringify([Object.entries(localStorage), "
                "Object.entries(sessionStorage)])"
            )
            assert remote_key not in stored
            # Sign-out forgets B's key too: the next person to sign in here is not B's operator.
            await page.click("#sign-out")
            await page.wait_for_selector("#api-key")
            await sign_in(page, keys.viewer)
            await page.wait_for_selector("td.task a:has-text('task on A')")
            assert await page.locator("#backend-principal").count() == 0
            held = await page.evaluate(
                "async () => (await import('/console/static/api.js')).backends"
                ".map((b) => [b.key, b.principal || null])"
            )
            assert all(key is None and who is None for key, who in held), held
            await page.select_option("#backend", origin_b)
            await page.wait_for_selector("#backend-key")  # B asks for a key again
            # A remote conversation's URL names its server: a reload asks for B's key (the page
            # forgot it) and opens the conversation on B, not "no conversation" on A.
            await page.fill("#backend-key", remote_key)
            await page.click("#backend-key-form button[type=submit]")
            await page.click("td.task a:has-text('task on B')")
            await page.wait_for_selector("#conv-title:has-text('task on B')")
            assert "b=" in page.url
            await page.reload()
            await page.wait_for_selector("#backend-key")
            await page.fill("#backend-key", remote_key)
            await page.click("#backend-key-form button[type=submit]")
            await page.wait_for_selector("#conv-title:has-text('task on B')")
            await page.wait_for_selector("#conn.live")
            # B's key revoked: the page lets it go, and choosing B asks for a key again.
            KeyStore(remote_home / "server" / "keys.json").revoke(rita.id)
            await page.wait_for_selector("#toast:has-text('refused the key')")
            assert await page.locator("#backend-principal").count() == 0
            await page.select_option("#backend", origin_b)
            await page.wait_for_selector("#backend-key")
            await page.context.close()
    finally:
        remote.send_signal(signal.SIGKILL)
        remote.wait(10)


def test_cors_never_allows_every_origin() -> None:
    with pytest.raises(ValueError, match="not an origin"):
        ServerSettings(cors_origins=("*",))
