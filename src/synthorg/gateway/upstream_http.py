"""The gateway's one HTTP stack to upstreams: httpcore over HTTP/1.1, errors mapped to what is
known.

Every provider (OpenAI-compatible, Anthropic) posts through ``UpstreamClient``: one client per
provider, made once, HTTP/1.1 only, h11's strict parsing (a signed, hex-prefixed or doubled
length is a protocol error; 1xx heads are skipped). httpcore re-tries only a connection that
could not be made; a request that was written is never sent again. Its errors are mapped to
two kinds the caller acts on: ``ConnectFailed`` (nothing was sent: the upstream cannot have
billed it) and ``UpstreamBroken`` (it may have reached the upstream).

Its errors live in ``upstream_errors`` so that providers can name them without loading
httpcore (about 0.1 s of imports) before the first request.

Streams are read through ``iter_lines`` with a cap on one line, so an upstream cannot grow the
gateway's memory with one endless event.

httpcore runs on asyncio streams here (``_AsyncioBackend``, its documented network-backend
hook) rather than anyio's, and its connections are kept in a one-origin list (``_Http11Pool``)
rather than its general pool: together about a quarter less client CPU per request
(docs/benchmarks/gateway.md, "One HTTP stack").
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

import httpcore
from httpcore._synchronization import AsyncLock

from synthorg.gateway.upstream_errors import ConnectFailed, UpstreamBroken, UpstreamHttpError

MAX_LINE_BYTES = 1 << 20
"""The longest server-sent-event line accepted (1 MiB; real chunks are a few KiB)."""
MAX_BODY_BYTES = 32 << 20
"""The largest non-streamed answer accepted."""
_CONNECT_TIMEOUT_S = 10.0
_READ_SIZE = 65536
_KEEP_IDLE = 64


_HTTPCORE_ERRORS = (
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
    httpcore.ProtocolError,
    httpcore.TimeoutException,
    httpcore.NetworkError,
)
"""Every error httpcore raises (it has no common base)."""
_NOTHING_SENT = (
    httpcore.ConnectError,
    httpcore.ConnectTimeout,
    httpcore.PoolTimeout,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
)


def _mapped(exc: Exception, where: str) -> UpstreamHttpError:
    if isinstance(exc, _NOTHING_SENT):
        return ConnectFailed(f"cannot connect to {where}: {exc!r}")
    return UpstreamBroken(f"exchange with {where} failed: {exc!r}")


class _AsyncioStream(httpcore.AsyncNetworkStream):
    """An asyncio stream whose writes are sent together before the next read.

    httpcore writes a request's head and body separately; sent as one segment, the request
    costs one send and one wake-up of the upstream instead of two (counted with strace).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._pending = bytearray()

    async def _flush(self, timeout: float | None) -> None:  # noqa: ASYNC109
        if not self._pending:
            return
        data, self._pending = bytes(self._pending), bytearray()
        try:
            self._writer.write(data)
            if timeout is None:  # the client sets none: no timer per write
                await self._writer.drain()
            else:
                async with asyncio.timeout(timeout):
                    await self._writer.drain()
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        await self._flush(timeout)
        try:
            if timeout is None:  # the provider's own deadline bounds the wait: no timer per read
                return await self._reader.read(max_bytes)
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        self._pending += buffer
        if len(self._pending) >= _READ_SIZE:
            await self._flush(timeout)

    async def aclose(self) -> None:
        self._writer.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle connection the upstream closed is not reused
            if self._reader.at_eof() or self._writer.is_closing():
                return True
            sock = self._writer.get_extra_info("socket")
            if sock is None or sock.fileno() < 0:
                return True
            return bool(select.select([sock.fileno()], [], [], 0)[0])
        names = {"client_addr": "sockname", "server_addr": "peername", "ssl_object": "ssl_object"}
        return self._writer.get_extra_info(names.get(info, info))


class _AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=(local_address, 0) if local_address else None
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class UpstreamResponse:
    """Status, lower-cased headers, and the body read with caps."""

    def __init__(self, response: httpcore.Response, where: str) -> None:
        self.status = response.status
        self.headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers
        }
        self._response = response
        self._where = where

    async def _pieces(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._response.aiter_stream():
                yield piece
        except _HTTPCORE_ERRORS as exc:  # ReadError, RemoteProtocolError, ReadTimeout
            raise UpstreamBroken(f"answer of {self._where} broke off: {exc!r}") from exc

    async def read(self, limit: int = MAX_BODY_BYTES) -> bytes:
        """The whole body; more than ``limit`` bytes is UpstreamBroken."""
        body = bytearray()
        async for piece in self._pieces():
            body += piece
            if len(body) > limit:
                raise UpstreamBroken(f"answer of {self._where} is over {limit} bytes")
        return bytes(body)

    async def iter_lines(self, max_line: int = MAX_LINE_BYTES) -> AsyncIterator[str]:
        """The body split into lines (``\\n``, ``\\r\\n``); a line over ``max_line`` bytes
        is UpstreamBroken, so memory stays bounded whatever the upstream sends."""
        buffer = bytearray()
        async for piece in self._pieces():
            start = len(buffer)
            buffer += piece
            cut = 0
            while (end := buffer.find(b"\n", max(start, cut))) >= 0:
                yield buffer[cut:end].rstrip(b"\r").decode()
                cut = end + 1
                start = cut
            del buffer[:cut]
            if len(buffer) > max_line:
                raise UpstreamBroken(f"{self._where} sent a line over {max_line} bytes")
        if buffer:
            yield buffer.decode()


def _proxy(proxy: str, ssl_context: ssl.SSLContext | None) -> httpcore.AsyncHTTPProxy:
    via = urlsplit(proxy)
    if via.scheme != "http" or not via.hostname:
        raise ConnectFailed(f"unsupported proxy URL {proxy!r} (an http:// proxy is needed)")
    auth = None
    if via.username is not None:
        auth = (unquote(via.username), unquote(via.password or ""))
    netloc = via.hostname if via.port is None else f"{via.hostname}:{via.port}"
    return httpcore.AsyncHTTPProxy(
        proxy_url=f"http://{netloc}",
        proxy_auth=auth,
        ssl_context=ssl_context,
        max_connections=None,
        max_keepalive_connections=64,
        http1=True,
        http2=False,
        retries=1,
        network_backend=_AsyncioBackend(),
    )


def _unyielding(conn: httpcore.AsyncHTTP11Connection) -> httpcore.AsyncHTTP11Connection:
    """The connection with an asyncio lock around its state changes instead of anyio's.

    On asyncio httpcore's ``AsyncLock`` is anyio's ``Lock``, which yields to the event loop
    on every uncontended acquire (a cancel-shielded ``sleep(0)``): twice per request, each a
    resumption of the whole request's coroutine chain. Here a connection serves one request
    at a time, so the lock is never contended; an asyncio lock excludes the same way without
    the yields (78 fewer Python calls and ~8% less gateway CPU per request, see
    docs/benchmarks/gateway.md). Should httpcore's internals change, its own lock stays.
    """
    if isinstance(getattr(conn, "_state_lock", None), AsyncLock):
        conn._state_lock = asyncio.Lock()  # type: ignore[assignment]
    return conn


class _Released:
    """A response body that hands its connection back to the pool once closed."""

    def __init__(self, body: Any, pool: _Http11Pool, conn: httpcore.AsyncHTTP11Connection):
        self._body = body
        self._pool = pool
        self._conn = conn

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._body:
            yield piece

    async def aclose(self) -> None:
        try:
            await self._body.aclose()
        finally:
            await self._pool.release(self._conn)


class _Http11Pool:
    """httpcore's HTTP/1.1 connections to one origin, the idle ones kept in a list.

    httpcore's own pool serves any number of origins and protocols under locks and
    cancellation shields; for one origin over HTTP/1.1 a list does the same job for about a
    fifth less client CPU per request (docs/benchmarks/gateway.md). Parsing, framing and
    the connection states stay httpcore's (``AsyncHTTP11Connection``).
    """

    def __init__(self, origin: httpcore.Origin, ssl_context: ssl.SSLContext | None) -> None:
        self._origin = origin
        self._ssl = ssl_context
        self._idle: list[httpcore.AsyncHTTP11Connection] = []
        self._backend = _AsyncioBackend()

    async def _connect(self) -> httpcore.AsyncHTTP11Connection:
        host = self._origin.host.decode("ascii")
        try:
            stream = await self._backend.connect_tcp(host, self._origin.port, _CONNECT_TIMEOUT_S)
        except httpcore.ConnectError:  # nothing was sent: once more
            stream = await self._backend.connect_tcp(host, self._origin.port, _CONNECT_TIMEOUT_S)
        if self._ssl is not None:
            stream = await stream.start_tls(self._ssl, host, _CONNECT_TIMEOUT_S)
        return _unyielding(httpcore.AsyncHTTP11Connection(self._origin, stream))

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        conn = None
        while self._idle:  # the most recently used first; one the upstream closed is dropped
            candidate = self._idle.pop()
            if candidate.is_available() and not candidate.has_expired():
                conn = candidate
                break
            await candidate.aclose()
        if conn is None:
            conn = await self._connect()
        try:
            response = await conn.handle_async_request(request)
        except BaseException:
            await conn.aclose()
            raise
        response.stream = _Released(response.stream, self, conn)
        return response

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        url: httpcore.URL,
        *,
        headers: list[tuple[bytes, bytes]],
        content: bytes,
        extensions: dict[str, Any],
    ) -> AsyncIterator[httpcore.Response]:
        """One request, its response open inside the block (as httpcore's pools do)."""
        request = httpcore.Request(method, url, headers=headers, content=content)
        response = await self.handle_async_request(request)
        try:
            yield response
        finally:
            await response.aclose()

    async def release(self, conn: httpcore.AsyncHTTP11Connection) -> None:
        """Keep a connection whose answer was read to its end; close any other."""
        if conn.is_idle() and len(self._idle) < _KEEP_IDLE:
            self._idle.append(conn)
        else:
            await conn.aclose()

    async def aclose(self) -> None:
        while self._idle:
            await self._idle.pop().aclose()


class UpstreamClient:
    """Keep-alive HTTP/1.1 to one upstream origin (through a proxy when given)."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str],
        proxy: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConnectFailed(f"unsupported upstream URL {base_url!r}")
        self._origin = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"
        self._prefix = parts.path.rstrip("/")
        host = [(b"host", parts.netloc.rsplit("@", 1)[-1].encode())]
        self._headers = host + [(k.encode(), v.encode()) for k, v in headers.items()]
        self.where = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        context = ssl_context or (ssl.create_default_context() if parts.scheme == "https" else None)
        # Only a connection that could not be made is tried again: a written request never.
        port = parts.port or (443 if parts.scheme == "https" else 80)
        origin = httpcore.Origin(parts.scheme.encode(), parts.hostname.encode(), port)
        self._pool: _Http11Pool | httpcore.AsyncHTTPProxy = (
            _proxy(proxy, context) if proxy else _Http11Pool(origin, context)
        )
        self._extensions = {"timeout": {"connect": _CONNECT_TIMEOUT_S}}
        self._urls: dict[str, httpcore.URL] = {}
        """Each path's URL, parsed once (httpcore parses a string URL on every request)."""

    @asynccontextmanager
    async def post(self, path: str, body: bytes) -> AsyncIterator[UpstreamResponse]:
        """POST ``body``; the response is read inside the block, its connection released after."""
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpcore.URL(f"{self._origin}{self._prefix}{path}")
        headers = [*self._headers, (b"content-length", str(len(body)).encode())]
        try:
            async with self._pool.stream(
                "POST", url, headers=headers, content=body, extensions=self._extensions
            ) as response:
                yield UpstreamResponse(response, self.where)
        except _HTTPCORE_ERRORS as exc:
            raise _mapped(exc, self.where) from exc

    async def aclose(self) -> None:
        """Close every connection."""
        await self._pool.aclose()
