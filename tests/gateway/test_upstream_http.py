"""Issue 30 finding 4: the gateway's HTTP stack against a hostile raw-socket upstream.

Each test is one defect of the hand-written HTTP/1.1 client it replaced: a POST re-sent after
it was written, a 1xx head taken for the answer, lax length and chunk-size parsing, an
unbounded line buffer, a stream with no end, reasoning text that escaped the ceiling cut.
"""

from __future__ import annotations

import asyncio
import gc
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psutil

from synthorg.store.protocol import Store

from .harness import FAKE_MODEL, open_run
from .hostile_upstream import Hangup, Writer, chunk, completion, gateway_over, hang_up, head, ok

MESSAGES = [{"role": "user", "content": "go"}]
BODY = {"model": FAKE_MODEL, "messages": MESSAGES, "max_tokens": 64}


async def _post(url: str, token: str, **extra: Any) -> httpx.Response:
    async with httpx.AsyncClient(
        headers={"authorization": f"Bearer {token}"}, timeout=httpx.Timeout(60.0)
    ) as http:
        return await http.post(f"{url}/chat/completions", json={**BODY, **extra})


async def test_a_post_written_then_dropped_is_never_sent_again(
    tmp_path: Path, store: Store
) -> None:
    """The second request goes out on the kept-alive connection, which the upstream drops
    after reading it: it may have been billed, so the gateway answers 502, not a re-send."""
    async with gateway_over(tmp_path, store, ok, hang_up, ok) as (gw, url, up):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        assert (await _post(url, token)).status_code == 200
        second = await _post(url, token)
    assert second.status_code == 502
    assert second.headers["x-synthorg-may-have-billed"] == "true"
    assert up.received == 2, "the upstream got the dropped POST twice"


async def early_hints(body: dict[str, Any], writer: Writer) -> None:
    payload = completion(body, "after hints")
    hints = head(103, "link: </style.css>; rel=preload")
    writer.write(hints + head(200, f"content-length: {len(payload)}") + payload)


async def test_an_early_hints_head_is_not_the_answer(tmp_path: Path, store: Store) -> None:
    async with gateway_over(tmp_path, store, early_hints) as (gw, url, _):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        response = await _post(url, token)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "after hints"


def _framed(*headers: str, body: bytes | None = None, chunked_size: str | None = None) -> Any:
    async def answer(request: dict[str, Any], writer: Writer) -> None:
        payload = body if body is not None else completion(request)
        if chunked_size is not None:
            size = chunked_size.format(n=len(payload))
            raw = head(200, "transfer-encoding: chunked") + f"{size}\r\n".encode()
            writer.write(raw + payload + b"\r\n0\r\n\r\n")
            return
        writer.write(head(200, *(h.format(n=len(payload)) for h in headers)) + payload)

    return answer


async def test_a_hex_prefixed_chunk_size_is_refused(tmp_path: Path, store: Store) -> None:
    async with gateway_over(tmp_path, store, _framed(chunked_size="0x{n:x}")) as (gw, url, _):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        response = await _post(url, token)
    assert response.status_code == 502, response.text


async def test_a_signed_content_length_is_refused(tmp_path: Path, store: Store) -> None:
    async with gateway_over(tmp_path, store, _framed("content-length: +{n}")) as (gw, url, _):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        response = await _post(url, token)
    assert response.status_code == 502, response.text


async def test_two_different_content_lengths_are_refused(tmp_path: Path, store: Store) -> None:
    answer = _framed("content-length: 9999", "content-length: {n}")
    async with gateway_over(tmp_path, store, answer) as (gw, url, _):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        response = await _post(url, token)
    assert response.status_code == 502, response.text


async def long_line(body: dict[str, Any], writer: Writer) -> None:
    """A stream whose second event is one 48 MB line (written from one 64 KiB piece)."""
    writer.write(head(200, "content-type: text/event-stream", "transfer-encoding: chunked"))
    first = chunk(body, {"role": "assistant", "content": ""})
    writer.write(f"{len(first):x}\r\n".encode() + first + b"\r\n")
    piece = b"x" * 65536
    frame = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    writer.write(b"6\r\ndata: \r\n")
    for _ in range(48 * 16):
        writer.write(frame)
        await writer.drain()


async def test_one_endless_sse_line_does_not_grow_memory(tmp_path: Path, store: Store) -> None:
    me = psutil.Process()
    gc.collect()
    before = me.memory_info().rss
    async with gateway_over(tmp_path, store, long_line) as (gw, url, _):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        response = await _post(url, token, stream=True)
        peak = me.memory_info().rss
    assert response.status_code == 200
    assert b"over 1048576 bytes" in response.content, response.content[-300:]
    assert peak - before < 64 * 2**20, f"RSS grew {(peak - before) / 2**20:.0f} MiB"


async def endless_empty_deltas(body: dict[str, Any], writer: Writer) -> None:
    writer.write(head(200, "content-type: text/event-stream"))  # framed by close
    writer.write(chunk(body, {"role": "assistant", "content": ""}))
    while True:
        writer.write(chunk(body, {}))
        await writer.drain()
        await asyncio.sleep(0.02)  # the upstream's pace, not a synchronisation


async def test_a_stream_ends_by_its_total_time_however_lively(tmp_path: Path, store: Store) -> None:
    answer = endless_empty_deltas
    async with gateway_over(tmp_path, store, answer, stream_timeout_s=1.0) as (gw, url, _):
        _, token = await open_run(gw, FAKE_MODEL, "fake", None)
        async with asyncio.timeout(30):  # the test's own bound: far past the 1 s cap
            response = await _post(url, token, stream=True)
    events = [line for line in response.text.splitlines() if line.startswith("data: {")]
    last = json.loads(events[-1][6:])
    assert last["error"]["code"] == "upstream_stream_too_long", events[-1]
    assert last["error"]["may_have_billed"] is True


async def reasoning_flood(body: dict[str, Any], writer: Writer) -> None:
    writer.write(head(200, "content-type: text/event-stream"))
    writer.write(chunk(body, {"role": "assistant", "content": ""}))
    for _ in range(2000):
        writer.write(chunk(body, {"reasoning_content": "think " * 40}))
        await writer.drain()
    writer.write(chunk(body, {"content": "done"}, "stop") + b"data: [DONE]\n\n")
    await writer.drain()
    raise Hangup  # the answer is framed by the close


async def test_reasoning_text_counts_towards_the_ceiling_cut(tmp_path: Path, store: Store) -> None:
    """2000 reasoning chunks of 240 chars (~120k tokens at $1000/Mtok: ~$120) against a
    $1 ceiling: the stream must be cut at the ceiling, not relayed whole."""
    async with gateway_over(tmp_path, store, reasoning_flood) as (gw, url, _):
        binding, token = await open_run(gw, FAKE_MODEL, "fake", Decimal("1"))
        response = await _post(url, token, stream=True, max_tokens=200_000)
        await gw.flush(binding.execution_id)
    events = [line for line in response.text.splitlines() if line.startswith("data: {")]
    assert len(events) < 2000, "relayed every reasoning chunk"
    assert json.loads(events[-1][6:])["error"]["code"] == "cost_ceiling_reached"
