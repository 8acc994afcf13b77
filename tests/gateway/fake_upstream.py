"""A hostile-scenario OpenAI-compatible upstream on loopback: usage or not, cut, stall, errors.

Each request is answered by the test's ``plan`` (a function of the parsed request body). The
upstream bills like a real provider: prompt tokens are the request body's bytes / 4 (so tool
schemas, tool results and every other field count), completion tokens the output's chars / 4
(at least 1). It records what it reported per request, so tests can compare the gateway's
ledger with what the upstream would have billed.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

Ending = Literal["done", "cut", "stall"]


@dataclass
class Reply:
    """How the upstream answers one request."""

    text: str = "ok"
    tool_calls: list[dict[str, Any]] | None = None
    usage: bool = True
    """Whether usage is reported (in the body, or as the stream's last chunk)."""
    ending: Ending = "done"
    """Streams: finish normally, drop the connection after ``cut_after`` chunks, or stall."""
    cut_after: int = 1
    status: int = 200
    error: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    piece: int = 16
    """Characters per streamed content chunk."""
    raw: dict[str, Any] | None = None
    """Send exactly this JSON (non-stream) / these chunks (``raw_chunks``), bypassing the rest."""
    raw_chunks: list[dict[str, Any]] | None = None
    over_report: int = 0
    """Completion tokens reported on top of the honest count (an upstream that lies, or that
    ignored ``max_tokens``)."""


@dataclass
class Record:
    """What the upstream saw and reported for one request."""

    body: dict[str, Any]
    body_bytes: int
    completion_id: str
    reported: tuple[int, int] | None = None
    """(prompt, completion) tokens the upstream reported, None when it reported nothing."""
    finished: bool = False


def _tokens(chars: int) -> int:
    return max(1, -(-chars // 4))


class FakeUpstream:
    """ASGI app: POST /v1/chat/completions answered per ``plan``."""

    def __init__(self) -> None:
        self.plan: Callable[[dict[str, Any]], Reply] = lambda body: Reply()
        self.records: list[Record] = []
        self.stalled = asyncio.Event()
        """Set when a stalling answer has stopped sending."""
        self.stall_ended = asyncio.Event()
        """Set when a stalled answer saw its client (the gateway) go away."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(raw)
        reply = self.plan(body)
        record = Record(body, len(raw), f"chatcmpl-{secrets.token_hex(6)}")
        self.records.append(record)
        if reply.status != 200:
            error = reply.error or {"message": "upstream error", "type": "server_error"}
            payload = json.dumps({"error": error}).encode()
            headers = [(b"content-type", b"application/json")]
            headers += [(k.encode(), v.encode()) for k, v in reply.headers.items()]
            await _send(send, reply.status, payload, headers)
            record.finished = True
            return
        if body.get("stream"):
            await self._stream(body, reply, record, send, receive)
        else:
            await self._complete(body, reply, record, send)

    def _usage(self, record: Record, out_chars: int, over: int = 0) -> dict[str, int]:
        prompt, completion = _tokens(record.body_bytes), _tokens(out_chars) + over
        record.reported = (prompt, completion)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    async def _complete(
        self, body: dict[str, Any], reply: Reply, record: Record, send: Send
    ) -> None:
        if reply.raw is not None:
            payload = reply.raw
        else:
            calls = reply.tool_calls
            out = len(reply.text) + sum(len(json.dumps(c)) for c in calls or ())
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if calls:
                message["tool_calls"] = calls
            payload = {
                "id": record.completion_id,
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
            if reply.usage:
                payload["usage"] = self._usage(record, out, reply.over_report)
        await _send(
            send, 200, json.dumps(payload).encode(), [(b"content-type", b"application/json")]
        )
        record.finished = True

    async def _stream(
        self, body: dict[str, Any], reply: Reply, record: Record, send: Send, receive: Receive
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": record.completion_id,
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        if reply.raw_chunks is not None:
            chunks = reply.raw_chunks
        else:
            text = reply.text
            chunks = [chunk({"role": "assistant", "content": ""})]
            chunks += [
                chunk({"content": text[i : i + reply.piece]})
                for i in range(0, len(text), reply.piece)
            ]
            chunks.append(chunk({}, "stop"))
        for i, data in enumerate(chunks):
            if reply.ending != "done" and i == reply.cut_after:
                if reply.ending == "cut":
                    raise ConnectionAbortedError("fake upstream drops the connection mid-stream")
                self.stalled.set()
                while (await receive())["type"] != "http.disconnect":
                    pass
                self.stall_ended.set()
                return
            await _event(send, data)
        if reply.usage and body.get("stream_options", {}).get("include_usage"):
            usage = {
                "id": record.completion_id,
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body["model"],
                "choices": [],
                "usage": self._usage(record, len(reply.text), reply.over_report),
            }
            await _event(send, usage)
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
        record.finished = True


async def _event(send: Send, data: dict[str, Any]) -> None:
    body = b"data: " + json.dumps(data).encode() + b"\n\n"
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
