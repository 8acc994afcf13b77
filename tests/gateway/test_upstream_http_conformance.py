"""The gateway's upstream HTTP stack against real server libraries (uvicorn's h11 and
httptools), and through real proxies: a CONNECT tunnel to a TLS upstream, with credentials.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from synthorg.gateway.upstream_errors import ConnectFailed
from synthorg.gateway.upstream_http import UpstreamClient
from synthorg.serving import serve_asgi

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Conformance:
    """ASGI app: each path answers with one framing the client must handle."""

    def __init__(self) -> None:
        self.clients: list[Any] = []

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.clients.append(scope["client"])
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        if path == "/v1/echo":
            headers = [(b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        elif path == "/v1/chunked":  # no content-length: the server frames it chunked
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for i in range(50):
                piece = b"data: %d\n\n" % i
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/v1/close":
            headers = [(b"content-length", b"5"), (b"connection", b"close")]
            await send({"type": "http.response.start", "status": 201, "headers": headers})
            await send({"type": "http.response.body", "body": b"bye!!"})
        else:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})


@pytest.fixture(params=["h11", "httptools"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Conformance, str]]:
    app = Conformance()
    async with serve_asgi(app, name="conformance", http=request.param) as listeners:
        url = listeners.http_url("/v1")
        assert url
        yield app, url


async def _read(client: UpstreamClient, path: str, body: bytes) -> tuple[int, bytes]:
    async with client.post(path, body) as response:
        return response.status, await response.read()


async def test_bodies_and_framings(server: tuple[Conformance, str]) -> None:
    app, url = server
    client = UpstreamClient(url, headers={"content-type": "application/octet-stream"})
    try:
        big = bytes(range(256)) * 4096  # 1 MiB, every byte value
        assert await _read(client, "/echo", big) == (200, big)
        async with client.post("/chunked", b"") as response:
            assert response.headers.get("transfer-encoding") == "chunked"
            lines = [line async for line in response.iter_lines() if line]
        assert lines == [f"data: {i}" for i in range(50)]
        assert await _read(client, "/nothing", b"x") == (404, b"")
        for _ in range(3):
            assert await _read(client, "/echo", b"again") == (200, b"again")
        assert len(set(map(tuple, app.clients))) == 1, "one keep-alive connection for all"
        assert await _read(client, "/close", b"") == (201, b"bye!!")
        assert await _read(client, "/echo", b"after close") == (200, b"after close")
        assert len(set(map(tuple, app.clients))) == 2, "a new connection after 'close'"
    finally:
        await client.aclose()


async def test_a_half_read_response_is_not_reused(server: tuple[Conformance, str]) -> None:
    app, url = server
    client = UpstreamClient(url, headers={})
    try:
        async with client.post("/chunked", b"") as response:
            lines = response.iter_lines()
            await anext(lines)
            await lines.aclose()  # the caller stopped reading (a stream cut at the ceiling)
        assert await _read(client, "/echo", b"fresh") == (200, b"fresh")
        assert len(set(map(tuple, app.clients))) == 2
    finally:
        await client.aclose()


async def test_a_connection_is_reused_without_yielding_on_its_state_lock(
    server: tuple[Conformance, str],
) -> None:
    """The kept-alive connection's state lock is asyncio's (httpcore's anyio lock yields to
    the loop on every acquire); losing the swap on an httpcore upgrade fails here."""
    app, url = server
    client = UpstreamClient(url, headers={})
    try:
        for n in range(3):
            assert await _read(client, "/echo", b"%d" % n) == (200, b"%d" % n)
        assert len(set(map(tuple, app.clients))) == 1
        (conn,) = client._pool._idle  # type: ignore[union-attr]
        assert type(conn._state_lock) is asyncio.Lock
    finally:
        await client.aclose()


def _self_signed(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context for 'localhost' and a client context trusting only it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cafile=str(cert_file))
    return server, client


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def test_https_through_a_connect_proxy(tmp_path: Path) -> None:
    server_tls, client_tls = _self_signed(tmp_path)

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n"), head
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        body = await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    tunnels: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        tunnels.append(head)
        port = head.split(b" ")[1].decode().rsplit(":", 1)[1]
        fields = dict(
            (name.strip().lower(), value.strip())
            for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
        )
        if fields.get(b"proxy-authorization") != b"Basic " + base64.b64encode(b"me:s3cret"):
            writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    tls_server = await asyncio.start_server(upstream, "127.0.0.1", 0, ssl=server_tls)
    proxy_server = await asyncio.start_server(proxy, "127.0.0.1", 0)
    up_port = tls_server.sockets[0].getsockname()[1]
    proxy_port = proxy_server.sockets[0].getsockname()[1]
    pool = UpstreamClient(
        f"https://localhost:{up_port}/v1",
        headers={},
        proxy=f"http://me:s3cret@127.0.0.1:{proxy_port}",
        ssl_context=client_tls,
    )
    refused = UpstreamClient(
        f"https://localhost:{up_port}/v1",
        headers={},
        proxy=f"http://me:wrong@127.0.0.1:{proxy_port}",
        ssl_context=client_tls,
    )
    try:
        assert await _read(pool, "/chat/completions", b'{"over":"tls"}') == (200, b'{"over":"tls"}')
        assert tunnels[0].startswith(f"CONNECT localhost:{up_port} HTTP/1.1\r\n".encode())
        with pytest.raises(ConnectFailed, match="407"):
            await _read(refused, "/chat/completions", b"{}")
    finally:
        await pool.aclose()
        await refused.aclose()
        tls_server.close()
        proxy_server.close()
