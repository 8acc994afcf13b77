"""The native loops' model client against a real unix-socket server: retries that are safe, only.

Issue 14 item 7: under load, runs died with "cannot reach the gateway ... Server disconnected
without sending a response" (the client reused a keep-alive connection the server was closing),
and a transient provider failure (429 / 5xx / overloaded) ended the whole run as an error.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from synthorg.engine.native.errors import ModelBudgetExhausted, ModelCallError
from synthorg.engine.native.model import OpenAICompatClient

COMPLETION = json.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}
        ],
    }
).encode()


@dataclass
class RawGateway:
    """A unix-socket HTTP/1.1 server answering per a script of actions, one per request.

    Actions: ``ok``; ``drop`` (read the request, close without a byte: a server closing a
    kept-alive connection as the request arrives); ``partial`` (status line and part of the
    body, then close); ``<status>[;header=value...]`` (an error answer).
    """

    path: Path
    script: list[str]
    seen: list[str] = field(default_factory=list)
    """The action taken for each request received, in order."""
    connections: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                action = self.script.pop(0) if self.script else "ok"
                self.seen.append(action)
                if action == "drop":
                    return
                if action == "partial":
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n" + COMPLETION[:20]
                    )
                    await writer.drain()
                    return
                if action == "ok":
                    status, body, headers = 200, COMPLETION, []
                else:
                    code, *extra = action.split(";")
                    status = int(code)
                    error = {"message": f"status {status}", "type": "upstream_error", "code": None}
                    body, headers = json.dumps({"error": error}).encode(), extra
                    if not any(h.startswith("x-synthorg-may-have-billed") for h in extra):
                        headers = [*extra, "x-synthorg-may-have-billed=false"]
                lines = [f"HTTP/1.1 {status} X", f"content-length: {len(body)}"]
                lines += [h.replace("=", ": ", 1) for h in headers]
                writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
                await writer.drain()
        finally:
            writer.close()


@pytest.fixture
async def raw(tmp_path: Path) -> AsyncIterator[RawGateway]:
    gateway = RawGateway(tmp_path / "gw.sock", [])
    server = await asyncio.start_unix_server(gateway.handle, path=str(gateway.path))
    try:
        yield gateway
    finally:
        server.close()


def _client(raw: RawGateway, **kwargs: object) -> OpenAICompatClient:
    return OpenAICompatClient(
        "http://localhost/v1",
        "bearer",
        "m",
        transport=httpx.AsyncHTTPTransport(uds=str(raw.path)),
        backoff_s=0.01,
        **kwargs,  # type: ignore[arg-type]
    )


MESSAGES = [{"role": "user", "content": "go"}]


async def test_a_request_the_server_dropped_is_not_resent(raw: RawGateway) -> None:
    """The gateway read the request and closed: it may have admitted and billed it (issue 30
    finding 3), so the client fails the call instead of sending it again."""
    raw.script = ["ok", "drop", "ok"]
    client = _client(raw)
    try:
        assert (await client.complete(MESSAGES, [])).text == "hi"
        with pytest.raises(ModelCallError):
            await client.complete(MESSAGES, [])
    finally:
        await client.aclose()
    assert raw.seen == ["ok", "drop"]


async def test_a_transient_status_that_may_have_billed_is_not_retried(raw: RawGateway) -> None:
    raw.script = ["502;x-synthorg-may-have-billed=true", "ok"]
    client = _client(raw)
    try:
        with pytest.raises(ModelCallError, match="502"):
            await client.complete(MESSAGES, [])
    finally:
        await client.aclose()
    assert raw.seen == ["502;x-synthorg-may-have-billed=true"]


async def test_transient_statuses_are_retried_honouring_retry_after(raw: RawGateway) -> None:
    raw.script = ["429;retry-after-ms=300", "503", "502;retry-after=0", "ok"]
    client = _client(raw)
    started = time.monotonic()
    try:
        assert (await client.complete(MESSAGES, [])).text == "hi"
    finally:
        await client.aclose()
    assert len(raw.seen) == 4
    assert time.monotonic() - started >= 0.3, "waited at least what retry-after-ms asked"


async def test_retries_are_bounded(raw: RawGateway) -> None:
    raw.script = ["502"] * 10
    client = _client(raw, max_retries=3)
    try:
        with pytest.raises(ModelCallError, match="502") as info:
            await client.complete(MESSAGES, [])
    finally:
        await client.aclose()
    assert info.value.status == 502
    assert len(raw.seen) == 4, "the first attempt and three retries"


async def test_nothing_is_resent_after_the_response_began(raw: RawGateway) -> None:
    raw.script = ["partial", "ok"]
    client = _client(raw)
    try:
        with pytest.raises(ModelCallError, match="broke off"):
            await client.complete(MESSAGES, [])
    finally:
        await client.aclose()
    assert raw.seen == ["partial"], "a response had begun: the call may have been billed"


@pytest.mark.parametrize("status", ["400", "401", "403"])
async def test_the_callers_mistakes_are_not_retried(raw: RawGateway, status: str) -> None:
    raw.script = [status, "ok"]
    client = _client(raw)
    try:
        with pytest.raises(ModelCallError):
            await client.complete(MESSAGES, [])
    finally:
        await client.aclose()
    assert raw.seen == [status]


async def test_the_ceiling_is_not_retried(raw: RawGateway) -> None:
    raw.script = ["402", "ok"]
    client = _client(raw)
    try:
        with pytest.raises(ModelBudgetExhausted):
            await client.complete(MESSAGES, [])
    finally:
        await client.aclose()
    assert raw.seen == ["402"]


async def test_an_unreachable_gateway_fails_after_bounded_retries(tmp_path: Path) -> None:
    client = OpenAICompatClient(
        "http://localhost/v1",
        "bearer",
        "m",
        transport=httpx.AsyncHTTPTransport(uds=str(tmp_path / "nobody.sock")),
        backoff_s=0.01,
        max_retries=2,
    )
    try:
        with pytest.raises(ModelCallError, match="cannot reach the gateway"):
            await client.complete(MESSAGES, [])
    finally:
        await client.aclose()
