"""The gateway's stack without the gateway: the floor under its added latency.

An ASGI app that forwards each chat request's body to the upstream with the gateway's own
client (``gateway.upstream_http.UpstreamClient``: httpcore, keep-alive) and relays the answer
(JSON whole, SSE chunk by chunk), served the way the gateway is (``serving.serve_asgi``:
uvicorn, httptools, uvloop, no proxy headers). No bearer, no admission, no ledger, no log:
what ``gateway_bench`` measures for it is what the HTTP stack itself adds, so the gateway's
figure minus this one is the cost of governing the request.

    python benchmarks/gateway_floor.py --port PORT --upstream http://127.0.0.1:UP/v1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from synthorg.gateway.upstream_http import UpstreamClient
from synthorg.serving import serve_asgi

Message = MutableMapping[str, Any]


class FloorApp:
    def __init__(self, upstream: str) -> None:
        self.client = UpstreamClient(upstream, headers={"content-type": "application/json"})

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await self.client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        stream = bool(json.loads(body).get("stream"))
        async with self.client.post("/chat/completions", body) as response:
            if not stream:
                data = await response.read()
                headers = [(b"content-type", b"application/json")]
                headers.append((b"content-length", str(len(data)).encode()))
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": data})
                return
            sse = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": sse})
            async for line in response.iter_lines():
                if line:
                    piece = line.encode() + b"\n\n"
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})


async def main(port: int, upstream: str) -> None:
    async with serve_asgi(FloorApp(upstream), name="floor", host="127.0.0.1", port=port,
                          proxy_headers=False):  # fmt: skip
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    import uvloop

    uvloop.run(main(args.port, args.upstream))
