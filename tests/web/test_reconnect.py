"""The conversation page across a server SIGKILL and restart on the same address: it
reconnects by itself with after=<last seq rendered>, and the rendered log has no gap and no
duplicate (the session survives the restart: it is persisted next to the key file)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.server import KeyStore, Role
from tests.server.real_server import _spawn
from tests.support import free_port

from .helpers import api_last_seq, new_page, rendered_seqs, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.bwrap, pytest.mark.slow]


async def _start(port: int, home: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        proc = _spawn(port, home, sink)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        for _ in range(3600):  # up to 3 minutes on a loaded machine
            if proc.poll() is not None:
                raise AssertionError(f"server exited: {log.read_text()[-3000:]}")
            try:
                if (await client.get("/ready")).status_code == 200:
                    return proc
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    proc.kill()
    raise AssertionError("server never became ready")


async def _observations(page: Any) -> int:
    count: int = await page.locator("#events .obs").count()
    return count


async def test_reconnect_after_sigkill_and_restart_has_no_gap_and_no_duplicate(
    repo: Path, tmp_path: Path, chrome: Any
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    key = KeyStore(home / "server" / "keys.json").create("olga", {Role.OPERATOR, Role.VIEWER})[1]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    proc = await _start(port, home, log)
    try:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            created = await client.post(
                "/api/conversations",
                json={"repository": str(repo), "prompt": "write progress", "model": "slow50"},
            )
            assert created.status_code == 201, created.text
            cid = created.json()["id"]
        page = await new_page(chrome, url)
        await sign_in(page, key)
        await page.goto(f"{url}/#/c/{cid}")
        await page.wait_for_selector("#conn.live")
        await page.wait_for_function("() => document.querySelectorAll('#events .obs').length >= 3")

        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        await page.wait_for_selector("#conn.down")
        proc = await _start(port, home, log)
        await page.wait_for_selector("#conn.live")  # the same session, after the restart
        await page.wait_for_selector("#conv-meta:has-text('interrupted')")
        before = await _observations(page)
        await page.click("#ctl-resume")
        await page.wait_for_function(
            f"() => document.querySelectorAll('#events .obs').length >= {before + 2}"
        )
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            assert (await client.post(f"/api/conversations/{cid}/cancel")).status_code == 200
        await page.wait_for_selector("#conv-meta:has-text('cancelled')")
        last = await api_last_seq(url, key, cid)
        await page.wait_for_function(
            f"() => document.querySelectorAll('#events [data-seq]').length >= {last}"
        )
        seqs = await rendered_seqs(page)
        assert len(seqs) == len(set(seqs)) and sorted(seqs) == list(range(1, last + 1))
        await page.context.close()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
