"""Issue 30 findings 5 and 8, issue 29 finding 7: what the gateway reads before it refuses.

Over raw sockets to a real gateway (uvicorn on loopback, SQLite ledger): unauthenticated
30 MB bodies are refused on their head with memory bounded; a trickled body is cut; a body
over the size cap is refused; two Authorization headers are refused.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, Literal

import psutil
import pytest

from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.embedded import serve_embedded
from synthorg.gateway.service import Gateway
from synthorg.serving import serve_asgi
from synthorg.store.protocol import Store

from .harness import FAKE_MODEL, fake_config, open_run

BODY = json.dumps({"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}]})


@asynccontextmanager
async def gateway(
    tmp_path: Path, store: Store, **config: Any
) -> AsyncIterator[tuple[Gateway, int]]:
    """A real gateway in front of an upstream nobody reaches (every test is refused first)."""
    settings = fake_config(tmp_path, "http://127.0.0.1:9/v1").model_copy(update=config)
    app = create_gateway_app(settings, signer_for(settings), store)
    try:
        async with serve_embedded(app, tcp_port=0) as gw:
            assert gw.tcp_base_url
            yield app.gateway, int(gw.tcp_base_url.rsplit(":", 1)[1].split("/")[0])
    finally:
        await app.gateway.aclose()


def _head(port: int, length: int, *headers: str) -> bytes:
    lines = [
        "POST /v1/chat/completions HTTP/1.1",
        f"host: 127.0.0.1:{port}",
        "content-type: application/json",
        f"content-length: {length}",
        *headers,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _status(reader: asyncio.StreamReader) -> int:
    line = await reader.readline()
    return int(line.split(b" ")[1])


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    return status, json.loads(await reader.readexactly(length))


async def test_unauthenticated_30mb_bodies_are_refused_on_their_head(
    tmp_path: Path, store: Store
) -> None:
    size, piece = 30_000_000, b"x" * 65536
    me = psutil.Process()
    gc.collect()
    before = me.memory_info().rss
    peak = before
    sent: list[int] = []

    async def one(port: int) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_head(port, size))
        written = 0

        async def feed() -> None:
            nonlocal written
            with suppress(ConnectionError):
                while written < size:
                    writer.write(piece)
                    await writer.drain()
                    written += len(piece)

        feeder = asyncio.create_task(feed())
        try:
            status = await _status(reader)
            sent.append(written)
            return status
        finally:
            feeder.cancel()
            with suppress(asyncio.CancelledError):
                await feeder
            writer.close()

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, me.memory_info().rss)
            await asyncio.sleep(0.05)  # a sampling period, not a synchronisation

    async with gateway(tmp_path, store) as (_, port):
        sampler = asyncio.create_task(sample())
        try:
            async with asyncio.timeout(120):
                statuses = await asyncio.gather(*(one(port) for _ in range(16)))
        finally:
            sampler.cancel()
    assert statuses == [401] * 16
    assert max(sent) < size, "a body was read whole before the bearer was checked"
    assert peak - before < 96 * 2**20, f"RSS grew {(peak - before) / 2**20:.0f} MiB"


async def test_a_trickled_body_is_cut_at_the_body_timeout(tmp_path: Path, store: Store) -> None:
    """One byte every 2 s (the issue's attack); the body timeout is 3 s here."""
    async with gateway(tmp_path, store, body_timeout_s=3.0) as (gw, port):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def trickle() -> None:
            with suppress(ConnectionError):
                for byte in BODY.encode():
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(2)  # the attacker's pace

        writer.write(_head(port, len(BODY), f"authorization: Bearer {token}"))
        trickler = asyncio.create_task(trickle())
        try:
            async with asyncio.timeout(30):  # the test's own bound, ten times the cap
                status, body = await _answer(reader)
        finally:
            trickler.cancel()
            writer.close()
    assert status == 408
    assert body["error"]["code"] == "body_timeout"


async def test_a_body_over_the_size_cap_is_refused(tmp_path: Path, store: Store) -> None:
    """20 MB to a run with no ceiling: refused on its declared length (default cap 8 MiB)."""
    async with gateway(tmp_path, store) as (gw, port):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_head(port, 20_000_000, f"authorization: Bearer {token}"))
        try:
            async with asyncio.timeout(30):
                status, body = await _answer(reader)
        finally:
            writer.close()
    assert status == 413
    assert body["error"]["code"] == "request_too_large"


@pytest.mark.parametrize("forged_first", [False, True])
async def test_two_authorization_headers_are_refused(
    tmp_path: Path, store: Store, forged_first: bool
) -> None:
    async with gateway(tmp_path, store) as (gw, port):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        bearers = [f"authorization: Bearer {token}", "authorization: Bearer forged.jwt.value"]
        if forged_first:
            bearers.reverse()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_head(port, len(BODY), *bearers) + BODY.encode())
        try:
            async with asyncio.timeout(30):
                status, body = await _answer(reader)
        finally:
            writer.close()
    assert status == 400
    assert body["error"]["code"] == "duplicate_authorization"


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_a_trickled_head_is_cut_at_the_head_timeout(
    tmp_path: Path, store: Store, http: Literal["httptools", "h11"]
) -> None:
    """A head sent one byte a second: the connection is closed ``head_timeout_s`` (2 s here)
    after it began, instead of waiting for the head forever."""
    settings = fake_config(tmp_path, "http://127.0.0.1:9/v1")
    app = create_gateway_app(settings, signer_for(settings), store)
    async with serve_asgi(app, name="gateway", port=0, http=http, head_timeout_s=2.0) as ends:
        assert ends.tcp is not None
        reader, writer = await asyncio.open_connection(*ends.tcp)

        async def trickle() -> None:
            with suppress(ConnectionError):
                for byte in b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-pad: " * 10:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(1)  # the attacker's pace

        trickler = asyncio.create_task(trickle())
        try:
            async with asyncio.timeout(30):  # the test's own bound
                assert await reader.read() == b"", "closed without an answer"
        finally:
            trickler.cancel()
            writer.close()
    await app.gateway.aclose()
