"""A minimal keep-alive HTTP/1.1 client for the gateway's hot path.

Kept over a library on measurement (benchmarks/gateway_client_bench.py, same run): aiohttp
costs +0.43-0.54 ms of CPU per request here, httpx +2.7 ms; the rule is to keep it only above
+0.3 ms. Its correctness is held by a conformance suite against uvicorn's h11 and httptools
parsers (tests/gateway/test_http1_conformance.py).

Scope on purpose: POST with a known-length body; responses framed by Content-Length, chunked
transfer or connection close; identity encoding only (no Accept-Encoding is sent); TLS via
``ssl``; HTTP and HTTPS proxies (absolute-form through an HTTP proxy, a CONNECT tunnel for
HTTPS; ``user:pass@`` in the proxy URL becomes Proxy-Authorization); no redirects or cookies.
A reused connection the server closed while idle is retried on another one (nothing of the
response was read, so nothing is duplicated).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from synthorg.errors import BoundaryError


class HttpError(BoundaryError):
    """The connection failed or the peer broke the protocol."""


class ConnectFailed(HttpError):
    """No connection could be made: nothing was sent."""


@dataclass
class Response:
    """Status, lower-cased headers, and the connection the body is read from."""

    status: int
    headers: dict[str, str]
    _conn: _Connection
    _pool: Http1Pool
    _done: bool = False
    _released: bool = False

    async def read(self) -> bytes:
        """The whole body; the connection goes back to the pool."""
        return b"".join([piece async for piece in self.iter_bytes()])

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives."""
        reader = self._conn.reader
        try:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                    if size == 0:
                        await reader.readuntil(b"\r\n")  # trailers are not supported
                        break
                    data = await reader.readexactly(size + 2)
                    yield data[:-2]
            elif "content-length" in self.headers:
                length = int(self.headers["content-length"])
                if length:
                    yield await reader.readexactly(length)
            else:
                self._conn.reusable = False
                while piece := await reader.read(65536):
                    yield piece
            self._done = True
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            self._conn.reusable = False
            raise HttpError(f"response body broken: {exc!r}") from exc
        finally:
            self.release()

    async def iter_lines(self) -> AsyncIterator[str]:
        """The body split into lines (for server-sent events)."""
        buffer = b""
        async for piece in self.iter_bytes():
            buffer += piece
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield line.rstrip(b"\r").decode()
        if buffer:
            yield buffer.decode()

    def release(self) -> None:
        """Return the connection to the pool (or close it when the body was not consumed)."""
        if self._released:
            return
        self._released = True
        if self._done and self._conn.reusable:
            self._pool.give_back(self._conn)
        else:
            self._conn.close()


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reusable = True

    def close(self) -> None:
        self.reusable = False
        self.writer.close()


class Http1Pool:
    """Keep-alive connections to one origin."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str],
        timeout_s: float,
        proxy: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HttpError(f"unsupported upstream URL {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = (
            (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        )
        host_header = parts.netloc.rsplit("@", 1)[-1]
        self.prefix = parts.path.rstrip("/")
        head = {"host": host_header, **headers}
        self._proxy: tuple[str, int] | None = None
        self._tunnel = b""
        if proxy:
            via = urlsplit(proxy)
            if via.scheme != "http" or not via.hostname:
                raise HttpError(f"unsupported proxy URL {proxy!r} (an http:// proxy is needed)")
            self._proxy = (via.hostname, via.port or 80)
            auth = {}
            if via.username is not None:
                secret = f"{unquote(via.username)}:{unquote(via.password or '')}".encode()
                auth["proxy-authorization"] = f"Basic {base64.b64encode(secret).decode()}"
            if self.ssl is None:  # plain HTTP through a proxy: absolute-form targets
                self.prefix = f"http://{host_header}{self.prefix}"
                head.update(auth)
            else:
                target = f"{self.host}:{self.port}"
                lines = [f"CONNECT {target} HTTP/1.1", f"host: {target}"]
                lines += [f"{k}: {v}" for k, v in auth.items()]
                self._tunnel = ("\r\n".join(lines) + "\r\n\r\n").encode()
        self._head = "".join(f"{k}: {v}\r\n" for k, v in head.items())
        self.timeout_s = timeout_s
        self._idle: list[_Connection] = []

    async def _connect(self) -> _Connection:
        try:
            if self._proxy is None:
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.ssl, limit=1 << 20
                )
                return _Connection(reader, writer)
            reader, writer = await asyncio.open_connection(*self._proxy, limit=1 << 20)
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        if self._tunnel:
            writer.write(self._tunnel)
            head = await reader.readuntil(b"\r\n\r\n")
            status = head.split(b" ", 2)[1] if head.count(b" ") >= 1 else b""
            if status != b"200":
                writer.close()
                line = head.split(b"\r\n", 1)[0].decode("latin-1")
                raise ConnectFailed(f"proxy refused the tunnel to {self.host}:{self.port}: {line}")
            assert self.ssl is not None
            await writer.start_tls(self.ssl, server_hostname=self.host)
        return _Connection(reader, writer)

    def give_back(self, conn: _Connection) -> None:
        """Keep an idle connection for the next request."""
        self._idle.append(conn)

    async def post(self, path: str, body: bytes) -> Response:
        """Send a POST; the response body is read from the returned Response."""
        request = (
            f"POST {self.prefix}{path} HTTP/1.1\r\n{self._head}content-length: {len(body)}\r\n\r\n"
        ).encode() + body
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                while self._idle:
                    conn = self._idle.pop()
                    try:
                        return await self._exchange(conn, request)
                    except (OSError, asyncio.IncompleteReadError):
                        conn.close()  # closed while idle: retry on the next one
                conn = await self._connect()
                return await self._exchange(conn, request)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, TimeoutError):
                raise HttpError(f"no response head within {self.timeout_s}s") from exc
            if isinstance(exc, HttpError):
                raise
            if isinstance(exc, OSError | asyncio.IncompleteReadError | ValueError):
                raise HttpError(f"request to {self.host}:{self.port} failed: {exc!r}") from exc
            raise

    async def _exchange(self, conn: _Connection, request: bytes) -> Response:
        conn.writer.write(request)
        head = await conn.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("connection", "").lower() == "close":
            conn.reusable = False
        return Response(status, headers, conn, self)

    async def aclose(self) -> None:
        """Close idle connections."""
        while self._idle:
            self._idle.pop().close()
