"""The OpenAI-compatible provider and its HTTP/1.1 client against raw loopback servers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit

import pytest

from synthorg.gateway.providers.base import ProviderError
from synthorg.gateway.providers.openai_compat import OpenAICompatProvider, proxy_for
from synthorg.gateway.wire import ChatMessage, ChatRequest

REQUEST = ChatRequest(model="m", messages=[ChatMessage(role="user", content="hi")])
COMPLETION = json.dumps(
    {
        "id": "c1",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hello"},
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
).encode()

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    return await reader.readexactly(length)


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"

    yield start
    for server in servers:
        server.close()


async def test_chunked_and_keep_alive_reuse(
    raw_server: Callable[[Handler], Awaitable[str]],
) -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while not reader.at_eof():
            try:
                await _read_request(reader)
            except asyncio.IncompleteReadError:
                break
            half = len(COMPLETION) // 2
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for part in (COMPLETION[:half], COMPLETION[half:]):
                writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        writer.close()

    provider = OpenAICompatProvider("raw", await raw_server(handler))
    for _ in range(3):
        response = await provider.complete(REQUEST)
        assert response.choices[0].message.content == "hello"
    assert connections == 1, "one keep-alive connection serves every request"
    await provider.aclose()


async def test_server_closing_idle_connections_is_retried(
    raw_server: Callable[[Handler], Awaitable[str]],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(COMPLETION))
        writer.write(COMPLETION)
        await writer.drain()
        writer.close()  # no keep-alive, and no "connection: close" header either

    provider = OpenAICompatProvider("raw", await raw_server(handler))
    for _ in range(3):
        assert (await provider.complete(REQUEST)).usage is not None
    await provider.aclose()


async def test_upstream_errors_map_to_statuses(
    raw_server: Callable[[Handler], Awaitable[str]],
) -> None:
    statuses = iter([400, 401, 503])

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        body = json.dumps({"error": {"message": "nope"}}).encode()
        status = next(statuses)
        writer.write(b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n\r\n" % (status, len(body)) + body)
        await writer.drain()
        writer.close()

    provider = OpenAICompatProvider("raw", await raw_server(handler))
    seen = []
    for _ in range(3):
        with pytest.raises(ProviderError, match="nope") as info:
            await provider.complete(REQUEST)
        seen.append(info.value.status)
    assert seen == [400, 502, 502], "the caller's mistakes pass through, ours become 502"
    await provider.aclose()


async def test_unreachable_and_timeout(raw_server: Callable[[Handler], Awaitable[str]]) -> None:
    provider = OpenAICompatProvider("gone", "http://127.0.0.1:9/v1")
    with pytest.raises(ProviderError, match="unreachable") as info:
        await provider.complete(REQUEST)
    assert info.value.status == 502

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # never answers; returns when the client gives up
        finally:
            writer.close()

    slow = OpenAICompatProvider("slow", await raw_server(silent), timeout_s=0.2)
    try:
        with pytest.raises(ProviderError, match=r"no answer within 0.2s") as timed_out:
            await slow.complete(REQUEST)
        assert timed_out.value.may_have_billed, "the upstream may have been working on it"
        assert not info.value.may_have_billed, "never reached: nothing to bill"
    finally:
        await provider.aclose()
        await slow.aclose()


async def test_stream_over_connection_close_framing(
    raw_server: Callable[[Handler], Awaitable[str]],
) -> None:
    seen: list[dict[str, object]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(json.loads(await _read_request(reader)))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
        for text in ("hel", "lo"):
            chunk = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": text}}]}
            writer.write(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")
            await writer.drain()
        usage = {
            "id": "c",
            "model": "m",
            "choices": [],
            "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
        }
        writer.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        await writer.drain()
        writer.close()

    provider = OpenAICompatProvider("raw", await raw_server(handler))
    chunks = [c async for c in provider.stream(REQUEST)]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hello"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2
    assert seen[0]["stream"] is True and seen[0]["stream_options"] == {"include_usage": True}
    await provider.aclose()


@pytest.mark.parametrize(
    ("url", "environ", "expected"),
    [
        ("https://api.example.com/v1", {"HTTPS_PROXY": "http://p:3128"}, "http://p:3128"),
        (
            "https://api.example.com/v1",
            {"https_proxy": "http://low:1", "HTTPS_PROXY": "http://up:2"},
            "http://low:1",
        ),
        ("http://api.example.com/v1", {"HTTPS_PROXY": "http://p:3128"}, None),
        ("http://api.example.com/v1", {"HTTP_PROXY": "http://p:3128"}, "http://p:3128"),
        (
            "https://api.example.com/v1",
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "example.com"},
            None,
        ),
        (
            "https://api.example.com/v1",
            {"HTTPS_PROXY": "http://p:1", "no_proxy": ".example.com"},
            None,
        ),
        ("https://api.example.com/v1", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
        (
            "https://api.example.com/v1",
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "other.org"},
            "http://p:1",
        ),
        ("http://127.0.0.1:8000/v1", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "127.0.0.1"}, None),
        ("https://api.example.com/v1", {}, None),
    ],
)
def test_proxy_selection_follows_the_environment(
    url: str, environ: dict[str, str], expected: str | None
) -> None:
    assert proxy_for(url, environ) == expected


async def test_requests_go_through_an_http_proxy(
    raw_server: Callable[[Handler], Awaitable[str]],
) -> None:
    """A real forward proxy on loopback relays the request; NO_PROXY bypasses it."""

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(COMPLETION))
        writer.write(COMPLETION)
        await writer.drain()
        writer.close()

    target = await raw_server(upstream)
    relayed: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, url, version = head.split(b"\r\n", 1)[0].split(b" ")
        relayed.append(url)
        parts = urlsplit(url.decode())
        assert parts.hostname and parts.port
        up_reader, up_writer = await asyncio.open_connection(parts.hostname, parts.port)
        rest = head.split(b"\r\n", 1)[1]
        up_writer.write(b"%s %s %s\r\n" % (method, parts.path.encode(), version) + rest)
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        up_writer.write(await reader.readexactly(length))
        await up_writer.drain()
        writer.write(await up_reader.read())  # the upstream closes after its answer
        await writer.drain()
        up_writer.close()
        writer.close()

    proxy_url = (await raw_server(proxy)).removesuffix("/v1")
    via = OpenAICompatProvider("via", target, environ={"HTTP_PROXY": proxy_url})
    direct = OpenAICompatProvider(
        "direct", target, environ={"HTTP_PROXY": proxy_url, "NO_PROXY": "127.0.0.1"}
    )
    try:
        assert (await via.complete(REQUEST)).choices[0].message.content == "hello"
        assert relayed == [f"{target}/chat/completions".encode()], "absolute-form via the proxy"
        assert (await direct.complete(REQUEST)).choices[0].message.content == "hello"
        assert len(relayed) == 1, "NO_PROXY bypassed the proxy"
    finally:
        await via.aclose()
        await direct.aclose()
