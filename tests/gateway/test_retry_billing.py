"""Issue 30 finding 3: a retry never bills twice.

The gateway marks every failed answer with whether the upstream may have billed it (header
``x-synthorg-may-have-billed`` and ``error.may_have_billed``); the native model client retries
only what is marked not billed. Through the real client, a real gateway and a raw-socket
upstream that answers 200 with HTML, stalls, or breaks off mid-answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.engine.native.errors import ModelCallError
from synthorg.engine.native.model import OpenAICompatClient
from synthorg.store import open_store
from synthorg.store.protocol import Store

from .harness import FAKE_MODEL, open_run
from .hostile_upstream import Answer, Hangup, Writer, gateway_over, head, ok

MESSAGES = [{"role": "user", "content": "go"}]


@pytest.fixture(params=["sqlite", "postgres"])
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Both stores: the gateway's own SQLite ledger and a shared PostgreSQL one (holds)."""
    if request.param == "sqlite":
        target: str | Path = tmp_path / "store.db"
    else:
        target = request.getfixturevalue("pg_schema")
    store = await open_store(target)
    try:
        yield store
    finally:
        await store.close()


async def html(body: dict[str, Any], writer: Writer) -> None:
    page = b"<html><body>502 Bad Gateway (but 200)</body></html>"
    writer.write(head(200, "content-type: text/html", f"content-length: {len(page)}") + page)


async def stall(body: dict[str, Any], writer: Writer) -> None:
    await asyncio.Event().wait()


async def break_off(body: dict[str, Any], writer: Writer) -> None:
    writer.write(head(200, "content-length: 400") + b'{"id": "chatcmpl-x", "choi')
    await writer.drain()
    raise Hangup


async def overloaded(body: dict[str, Any], writer: Writer) -> None:
    error = b'{"error": {"message": "overloaded", "type": "server_error"}}'
    writer.write(head(503, f"content-length: {len(error)}") + error)


@pytest.mark.parametrize(
    ("answer", "timeout_s"),
    [(html, 30.0), (stall, 0.5), (break_off, 30.0)],
    ids=["html", "stall", "break_off"],
)
async def test_a_failure_that_may_have_billed_is_sent_and_billed_once(
    tmp_path: Path, ledger: Store, answer: Answer, timeout_s: float
) -> None:
    async with gateway_over(tmp_path, ledger, answer, timeout_s=timeout_s) as (gw, url, up):
        binding, token = await open_run(gw, FAKE_MODEL, "fake", None)
        client = OpenAICompatClient(url, token, FAKE_MODEL, backoff_s=0.01, max_retries=3)
        try:
            with pytest.raises(ModelCallError, match="502"):
                await client.complete(MESSAGES, [])
        finally:
            await client.aclose()
        await gw.flush(binding.execution_id)
        usage = await gw.usage(binding.execution_id)
    assert up.received == 1, "the gateway said it may have billed: the client must not re-send"
    assert usage.requests == 1


async def test_the_mark_is_on_the_header_and_in_the_error_body(
    tmp_path: Path, store: Store
) -> None:
    async with gateway_over(tmp_path, store, html, overloaded) as (gw, url, _):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {token}"}) as http:
            body = {"model": FAKE_MODEL, "messages": MESSAGES}
            billed = await http.post(f"{url}/chat/completions", json=body)
            unbilled = await http.post(f"{url}/chat/completions", json=body)
    assert billed.status_code == unbilled.status_code == 502
    assert billed.headers["x-synthorg-may-have-billed"] == "true"
    assert billed.json()["error"]["may_have_billed"] is True
    assert unbilled.headers["x-synthorg-may-have-billed"] == "false"
    assert unbilled.json()["error"]["may_have_billed"] is False


async def test_a_failure_marked_not_billed_is_retried(tmp_path: Path, store: Store) -> None:
    async with gateway_over(tmp_path, store, overloaded, overloaded, ok) as (gw, url, up):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        client = OpenAICompatClient(url, token, FAKE_MODEL, backoff_s=0.01, max_retries=3)
        try:
            assert (await client.complete(MESSAGES, [])).text == "ok"
        finally:
            await client.aclose()
    assert up.received == 3
