"""Exactly-once delivery (15.4): an Idempotency-Key on conversation creation and on messages;
a retry has no second effect, a reused key with another body is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from .conftest import Keys, client_for
from .helpers import create, events, wait_running, wait_status

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


async def test_a_retried_create_makes_one_conversation(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    request = {"repository": str(repo), "prompt": "once", "start": False}
    headers = {"Idempotency-Key": "create-1"}
    first = await operator.post("/api/conversations", json=request, headers=headers)
    again = await operator.post("/api/conversations", json=request, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    assert (await operator.get("/api/conversations/count")).json() == {"count": 1}
    other = await operator.post(
        "/api/conversations", json={**request, "prompt": "twice"}, headers=headers
    )
    assert other.status_code == 409 and other.json()["code"] == "idempotency_key_reused"
    fresh = await operator.post(
        "/api/conversations", json=request, headers={"Idempotency-Key": "create-2"}
    )
    assert fresh.status_code == 201 and fresh.json()["id"] != first.json()["id"]


async def test_concurrent_retries_of_a_message_deliver_it_once(
    operator: httpx.AsyncClient, repo: Path
) -> None:
    cid = (await create(operator, repo, start=True, model="slow50"))["id"]
    await wait_running(operator, cid)
    url = f"/api/conversations/{cid}/messages"
    headers = {"Idempotency-Key": "msg-1"}
    answers = await asyncio.gather(
        *(operator.post(url, json={"text": "only once"}, headers=headers) for _ in range(4))
    )
    delivered = [a for a in answers if a.status_code == 200]
    assert delivered and all(a.json()["delivery"] == "steered" for a in delivered)
    assert all(a.status_code in (200, 409) for a in answers)
    later = await operator.post(url, json={"text": "only once"}, headers=headers)
    assert later.status_code == 200 and later.headers["idempotent-replayed"] == "true"
    changed = await operator.post(url, json={"text": "something else"}, headers=headers)
    assert changed.status_code == 409
    assert (await operator.post(f"/api/conversations/{cid}/cancel")).status_code == 200
    await wait_status(operator, cid, "cancelled")
    texts = [e["event"]["text"] for e in await events(operator, cid, kind="message")]
    assert texts.count("only once") == 1


async def test_a_key_is_per_api_key(
    operator: httpx.AsyncClient, repo: Path, app: FastAPI, keys: Keys
) -> None:
    request = {"repository": str(repo), "prompt": "mine", "start": False}
    headers = {"Idempotency-Key": "shared"}
    mine = await operator.post("/api/conversations", json=request, headers=headers)
    async with client_for(app, keys.admin) as admin:
        theirs = await admin.post("/api/conversations", json=request, headers=headers)
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]
