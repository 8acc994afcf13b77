"""Reading a request's head and body within caps: one bearer, bounded size, time and memory.

The gateway authenticates on the head before it reads a byte of the body (an unauthenticated
peer never has more than the server's own read buffer in flight), then reads the body
within ``max_body_bytes`` (refused at once when Content-Length says more), within
``body_timeout_s`` from the head (a trickled body is cut), and within ``max_body_in_flight``
bytes held by all requests together (past it, 503: the gateway's memory stays bounded).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from synthorg.gateway.refusals import GatewayRefusal

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


def _refusal(status: int, message: str, code: str) -> GatewayRefusal:
    return GatewayRefusal(status, message, "invalid_request_error", code)


def authorization(scope: Scope) -> str | None:
    """The request's one Authorization header; two or more are refused (400), so a proxy
    and the gateway can never read different bearers."""
    values = [value for key, value in scope["headers"] if key == b"authorization"]
    if len(values) > 1:
        raise _refusal(400, "more than one Authorization header", "duplicate_authorization")
    return bytes(values[0]).decode("latin-1") if values else None


def _declared_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyReader:
    """Reads request bodies under the three caps; one per app (the in-flight cap is shared)."""

    def __init__(self, *, max_bytes: int, timeout_s: float, max_in_flight: int) -> None:
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        """Body bytes held by requests being read or parsed right now."""

    def _too_large(self) -> GatewayRefusal:
        return _refusal(413, f"request body over {self.max_bytes} bytes", "request_too_large")

    @asynccontextmanager
    async def body(self, scope: Scope, receive: Receive) -> AsyncIterator[bytes]:
        """The whole body, counted as in flight until the block exits."""
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_bytes:
            raise self._too_large()
        held = 0
        chunks: list[bytes] = []
        try:
            try:
                async with asyncio.timeout(self.timeout_s):
                    while True:
                        message = await receive()
                        if message["type"] == "http.disconnect":
                            raise _refusal(400, "the client went away mid-body", "client_gone")
                        piece = message.get("body", b"")
                        if held + len(piece) > self.max_bytes:
                            raise self._too_large()
                        if self.in_flight + len(piece) > self.max_in_flight:
                            raise GatewayRefusal(
                                503,
                                "the gateway holds too many request bodies; retry shortly",
                                "server_error",
                                "gateway_busy",
                            )
                        held += len(piece)
                        self.in_flight += len(piece)
                        chunks.append(piece)
                        if not message.get("more_body"):
                            break
            except TimeoutError as exc:
                raise _refusal(
                    408, f"request body not received within {self.timeout_s:g}s", "body_timeout"
                ) from exc
            yield b"".join(chunks)
        finally:
            self.in_flight -= held
