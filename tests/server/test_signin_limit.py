"""Console sign-in rate limit: repeated bad keys from one address get 429 with Retry-After,
whatever key comes next, and the answers never say which part of a key was wrong."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from synthorg.server import KeyStore, ServerSettings, create_app
from synthorg.service.runs import LocalRunService
from synthorg.store import Store

from .conftest import Keys

pytestmark = pytest.mark.bwrap

LIMIT = 3
WINDOW_S = 2.0


@pytest.fixture
async def limited(
    tmp_path: Path, store: Store, service: LocalRunService, key_store: KeyStore
) -> AsyncIterator[FastAPI]:
    settings = ServerSettings(
        keys_file=key_store.path,
        repository_roots=(tmp_path,),
        signin_max_failures=LIMIT,
        signin_window_s=WINDOW_S,
    )
    application = create_app(settings, store=store, run_service=service, auth=key_store)
    async with application.router.lifespan_context(application):
        yield application


def _client(app: FastAPI, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def test_bad_keys_are_limited_per_address_then_released(limited: FastAPI, keys: Keys) -> None:
    prefix, key_id, _ = keys.viewer.split("_", 2)
    bad_keys = [
        "not a key at all",
        f"{prefix}_{key_id}_{'w' * 43}",  # a real key's id, a wrong secret
        keys.viewer[:-1] + ("A" if keys.viewer[-1] != "A" else "B"),  # one character off
    ]
    async with _client(limited, "10.0.0.1") as attacker, _client(limited, "10.0.0.2") as other:
        answers = []
        for bad in bad_keys:
            response = await attacker.post("/console/session", json={"key": bad})
            assert response.status_code == 401
            answers.append(response.json())
        assert all(a == answers[0] for a in answers)  # nothing says which part was wrong

        refused = await attacker.post("/console/session", json={"key": keys.viewer})
        assert refused.status_code == 429  # even the right key: the limit is the address's
        wait = int(refused.headers["Retry-After"])
        assert 1 <= wait <= WINDOW_S + 1
        assert refused.json()["code"] == "too_many_requests"
        assert keys.viewer not in refused.text

        assert (await other.post("/console/session", json={"key": keys.viewer})).status_code == 200

        # Released once the oldest failure leaves the window (bounded wait on the condition).
        deadline = asyncio.get_running_loop().time() + WINDOW_S + 10
        while True:
            again = await attacker.post("/console/session", json={"key": keys.viewer})
            if again.status_code == 200 or asyncio.get_running_loop().time() > deadline:
                break
            assert again.status_code == 429
            await asyncio.sleep(0.1)
        assert again.status_code == 200


async def test_a_success_does_not_reset_the_count(limited: FastAPI, keys: Keys) -> None:
    async with _client(limited, "10.0.0.3") as client:
        for attempt in range(LIMIT):
            await client.post("/console/session", json={"key": f"bad-{attempt}"})
            if attempt == 0:
                ok = await client.post("/console/session", json={"key": keys.viewer})
                assert ok.status_code == 200
        assert (await client.post("/console/session", json={"key": "bad"})).status_code == 429


def test_the_default_is_sensible() -> None:
    settings = ServerSettings()
    assert settings.signin_max_failures == 10 and settings.signin_window_s == 300
