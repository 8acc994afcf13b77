"""A standalone OpenAI-compatible upstream serving a ScriptedProvider (no auth, no metering).

For benchmarks and tests: ``python -m synthorg.gateway.scripted_server --port N --script echo``.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from pydantic import ValidationError

from synthorg.gateway.providers.base import ProviderError
from synthorg.gateway.providers.scripted import ScriptedProvider
from synthorg.gateway.scripted import resolve_script
from synthorg.gateway.wire import ChatRequest, error_body

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]


class ScriptedUpstream:
    """ASGI app: POST /v1/chat/completions answered by a ScriptedProvider."""

    def __init__(self, provider: ScriptedProvider) -> None:
        self.provider = provider
        self.requests: list[ChatRequest] = []
        """Every request received, in order (tests inspect what the gateway forwarded)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        if scope["path"] not in ("/v1/chat/completions", "/chat/completions"):
            await self._send(send, 404, error_body("not found", "invalid_request_error"))
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            request = ChatRequest.model_validate_json(body)
        except ValidationError as exc:
            await self._send(send, 400, error_body(str(exc), "invalid_request_error"))
            return
        self.requests.append(request)
        try:
            if request.stream:
                await self._stream(request, send)
            else:
                response = await self.provider.complete(request)
                await self._send(send, 200, response.to_json())
        except ProviderError as exc:
            await self._send(send, exc.status, error_body(exc.message, exc.type))

    async def _stream(self, request: ChatRequest, send: Send) -> None:
        stream = self.provider.stream(request)
        first = await anext(stream)  # errors surface before the 200 goes out
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        want_usage = request.wants_usage_in_stream()
        chunk = first
        while True:
            if chunk.choices or want_usage:
                data = chunk.to_json()
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"data: " + data + b"\n\n",
                        "more_body": True,
                    }
                )
            try:
                chunk = await anext(stream)
            except StopAsyncIteration:
                break
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    @staticmethod
    async def _send(send: Send, status: int, body: bytes) -> None:
        headers = [*_JSON, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def main(argv: list[str] | None = None) -> None:
    """Run the scripted upstream with uvicorn."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8788)
    parser.add_argument("--script", default="echo", help="registered name or module:attr")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    provider = ScriptedProvider(
        {}, default=resolve_script(args.script), latency_s=args.latency_ms / 1000
    )
    uvicorn.run(
        ScriptedUpstream(provider),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        http="httptools",
        loop="uvloop",
    )


if __name__ == "__main__":
    main()
