"""A raw-socket upstream on loopback that answers each request with scripted bytes.

No HTTP library frames its answers, so it can break HTTP/1.1 the way a hostile or broken
upstream does (bad chunk sizes, signed or doubled Content-Length, 1xx heads, a close after
the request was read, endless events). Each request's head and body are recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.embedded import serve_embedded
from synthorg.gateway.service import Gateway
from synthorg.store.protocol import Store

from .harness import fake_config

Writer = asyncio.StreamWriter
Answer = Callable[[dict[str, Any], Writer], Awaitable[None]]
"""Writes the answer to one parsed request body; returning keeps the connection alive."""


class Hangup(Exception):
    """Raised by an answer to close the connection without another byte."""


@dataclass
class HostileUpstream:
    """Scripted answers, one per request (the last repeats); ``received`` counts requests."""

    answers: list[Answer]
    bodies: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def received(self) -> int:
        return len(self.bodies)

    async def _handle(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = json.loads(await reader.readexactly(length))
                answer = self.answers[min(len(self.bodies), len(self.answers) - 1)]
                self.bodies.append(body)
                self.arrived.set()
                await answer(body, writer)
                await writer.drain()
        except (Hangup, ConnectionError):
            return
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def hostile(*answers: Answer) -> AsyncIterator[HostileUpstream]:
    """Serve ``answers`` on 127.0.0.1 (a free port) until the block exits."""
    upstream = HostileUpstream(list(answers))
    server = await asyncio.start_server(upstream._handle, "127.0.0.1", 0)
    upstream.port = server.sockets[0].getsockname()[1]
    try:
        yield upstream
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)


def completion(body: dict[str, Any], text: str = "ok", tokens_out: int = 5) -> bytes:
    """An OpenAI chat completion JSON for ``body``'s model, reporting usage."""
    return json.dumps(
        {
            "id": "chatcmpl-hostile",
            "object": "chat.completion",
            "created": 1,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": tokens_out,
                "total_tokens": 10 + tokens_out,
            },
        }
    ).encode()


def chunk(body: dict[str, Any], delta: dict[str, Any], finish: str | None = None) -> bytes:
    """One SSE event carrying a chat-completion chunk."""
    data = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": body["model"],
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def head(status: int = 200, *headers: str) -> bytes:
    """A response head with the given header lines."""
    lines = [f"HTTP/1.1 {status} X", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def hang_up(body: dict[str, Any], writer: Writer) -> None:
    """Read the request, close without a byte (a POST a client must never re-send)."""
    raise Hangup


def fixed(raw: bytes) -> Answer:
    """Answer with exactly ``raw``, keeping the connection."""

    async def answer(body: dict[str, Any], writer: Writer) -> None:
        writer.write(raw)

    return answer


def ok(body: dict[str, Any], writer: Writer) -> Awaitable[None]:
    """A well-formed 200 completion."""
    payload = completion(body)
    return fixed(head(200, f"content-length: {len(payload)}") + payload)(body, writer)


@contextlib.asynccontextmanager
async def gateway_over(
    tmp_path: Path, store: Store, *answers: Answer, **provider: Any
) -> AsyncIterator[tuple[Gateway, str, HostileUpstream]]:
    """A real gateway (HTTP on loopback, ``store`` as ledger) whose provider 'fake' is a
    HostileUpstream serving ``answers``; ``provider`` overrides its config fields."""
    async with hostile(*answers) as upstream:
        config = fake_config(tmp_path, upstream.base_url)
        changed = config.providers[0].model_copy(update=provider)
        config = config.model_copy(update={"providers": [changed]})
        app = create_gateway_app(config, signer_for(config), store)
        try:
            async with serve_embedded(app, tcp_port=0) as gw:
                assert gw.tcp_base_url
                yield app.gateway, gw.tcp_base_url, upstream
        finally:
            await app.gateway.aclose()
