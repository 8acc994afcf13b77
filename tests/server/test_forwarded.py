"""`X-Forwarded-For` is trusted only from the proxies `[server] forwarded_allow_ips` names
(none by default): a client cannot pick its address to slip past the sign-in limit. The app is
served with `synthorg serve`'s own uvicorn configuration on loopback."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from synthorg.cli.serve import uvicorn_config
from synthorg.server import KeyStore, ServerSettings, create_app
from synthorg.service.runs import LocalRunService
from synthorg.store import Store

from .conftest import Keys

pytestmark = pytest.mark.bwrap

LIMIT = 3


@contextlib.asynccontextmanager
async def _serve(
    settings: ServerSettings, store: Store, service: LocalRunService, auth: KeyStore
) -> AsyncIterator[str]:
    app = create_app(settings, store=store, run_service=service, auth=auth)
    server = uvicorn.Server(uvicorn_config(app, settings))
    task = asyncio.create_task(server.serve())
    deadline = asyncio.get_running_loop().time() + 60
    while not server.started:
        assert not task.done() and asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


def _settings(tmp_path: Path, key_store: KeyStore, **extra: object) -> ServerSettings:
    return ServerSettings(
        port=0,
        keys_file=key_store.path,
        repository_roots=(tmp_path,),
        signin_max_failures=LIMIT,
        **extra,  # type: ignore[arg-type]
    )


async def _lock_out(client: httpx.AsyncClient) -> None:
    for _ in range(LIMIT):
        assert (await client.post("/console/session", json={"key": "bad"})).status_code == 401
    assert (await client.post("/console/session", json={"key": "bad"})).status_code == 429


async def test_forwarded_for_is_ignored_by_default(
    tmp_path: Path, store: Store, service: LocalRunService, key_store: KeyStore, keys: Keys
) -> None:
    settings = _settings(tmp_path, key_store)
    async with (
        _serve(settings, store, service, key_store) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await _lock_out(client)
        for n in range(12):
            forged = {"X-Forwarded-For": f"203.0.113.{n}"}
            answer = await client.post("/console/session", json={"key": "bad"}, headers=forged)
            assert answer.status_code == 429, (n, answer.text)
        good = await client.post(
            "/console/session",
            json={"key": keys.viewer},
            headers={"X-Forwarded-For": "198.51.100.7"},
        )
        assert good.status_code == 429


async def test_a_configured_proxy_is_trusted(
    tmp_path: Path, store: Store, service: LocalRunService, key_store: KeyStore, keys: Keys
) -> None:
    settings = _settings(tmp_path, key_store, forwarded_allow_ips=("127.0.0.1",))
    async with _serve(settings, store, service, key_store) as url:
        async with httpx.AsyncClient(
            base_url=url, headers={"X-Forwarded-For": "203.0.113.1"}
        ) as one:
            await _lock_out(one)
        # Behind the proxy each browser has its own address: another one is not locked out.
        async with httpx.AsyncClient(
            base_url=url, headers={"X-Forwarded-For": "203.0.113.2"}
        ) as two:
            assert (
                await two.post("/console/session", json={"key": keys.viewer})
            ).status_code == 200


def test_a_wildcard_is_refused() -> None:
    with pytest.raises(ValueError, match="not an address or network"):
        ServerSettings(forwarded_allow_ips=("*",))
