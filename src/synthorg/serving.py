"""Serve an ASGI app inside the running event loop, on a unix socket and/or loopback TCP.

The gateway, the MCP server and tests embed their servers this way: the host process keeps
its own signal handlers, a unix socket is created 0600 (only this user, and what it forwards
into a sandbox, may connect) and removed on exit, and port 0 picks a free port.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import uvicorn

from synthorg.errors import BoundaryError, UsageError
from synthorg.localsock import peer_credentials

_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0
KEEP_ALIVE_S = 75
"""How long an idle keep-alive connection stays open: well past httpx's pool expiry (5 s) and
aiohttp's (15 s), so a client never reuses a connection the server is closing (uvicorn's own
default is exactly httpx's 5 s, which raced)."""


HEAD_TIMEOUT_S = 30.0
"""Longest a request head may take to arrive; any client sends its head at once."""


@dataclass(frozen=True, slots=True)
class Listeners:
    """Where an embedded server listens."""

    tcp: tuple[str, int] | None
    """(host, port) of the TCP listener, None without one."""
    uds: Path | None
    """The unix socket path, None without one."""

    def http_url(self, path: str = "") -> str | None:
        """``http://host:port<path>`` of the TCP listener, None without one."""
        if self.tcp is None:
            return None
        host, port = self.tcp
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}{path}"


class _EmbeddedServer(uvicorn.Server):
    # The host process owns its signals; an embedded server must not take SIGINT/SIGTERM.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _peer_checked(base: type[asyncio.Protocol], uids: frozenset[int]) -> type[asyncio.Protocol]:
    """``base`` (uvicorn's HTTP protocol) refusing unix-socket peers whose uid is not in
    ``uids``: closed at accept, before a byte of the request is read."""

    class PeerChecked(base):  # type: ignore[misc,valid-type]
        def connection_made(self, transport: asyncio.Transport) -> None:
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family == socket.AF_UNIX:
                try:
                    uid = peer_credentials(sock)[1]
                except OSError:
                    uid = -1
                if uid not in uids:
                    transport.abort()
                    return
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            if getattr(self, "transport", None) is not None:  # refused: never made
                super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if getattr(self, "transport", None) is not None:
                super().data_received(data)

    return PeerChecked


def _head_timed(base: type[asyncio.Protocol], seconds: float) -> type[asyncio.Protocol]:
    """``base`` (uvicorn's HTTP protocol) closing a connection whose request head has not
    arrived ``seconds`` after its first byte (or after the connection was made): uvicorn
    itself waits for a head forever, so a peer trickling one could hold a connection open.
    An idle kept-alive connection is left to uvicorn's keep-alive timeout."""

    class HeadTimed(base):  # type: ignore[misc,valid-type]
        _head_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            transport = getattr(self, "transport", None)
            if transport is None:  # refused at accept
                return
            waiting_on = self.cycle  # the request before the head that is arriving

            def expire() -> None:
                self._head_timer = None
                if self.cycle is waiting_on and not transport.is_closing():
                    transport.close()

            self._head_timer = asyncio.get_running_loop().call_later(seconds, expire)

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):
                self._arm()
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

    return HeadTimed


def bind_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket; IPPROTO_TCP so asyncio sets TCP_NODELAY on accepted sockets."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BoundaryError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def bind_uds(path: Path) -> socket.socket:
    """A listening unix socket at ``path`` (mode 0600); refuses to replace a non-socket."""
    if path.exists() or path.is_symlink():
        if not path.is_socket():
            raise UsageError(f"{path} exists and is not a socket; choose another path")
        path.unlink()  # a stale socket of an earlier run
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise BoundaryError(f"cannot listen on unix socket {path}: {exc.strerror}") from exc
    os.chmod(path, 0o600)
    sock.listen(1024)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def serve_asgi(
    app: Any,
    *,
    name: str,
    uds: Path | None = None,
    host: str | None = "127.0.0.1",
    port: int | None = 0,
    http: Literal["h11", "httptools"] = "httptools",
    log_level: str = "warning",
    keep_alive_s: int = KEEP_ALIVE_S,
    peer_uids: frozenset[int] | None = None,
    head_timeout_s: float = HEAD_TIMEOUT_S,
    proxy_headers: bool = True,
) -> AsyncIterator[Listeners]:
    """Serve ``app`` until the block exits. ``port=None`` (or ``host=None``) means no TCP.

    A request head must arrive within ``head_timeout_s`` of its first byte (of the
    connection, for a new one); then the connection is closed.

    ``peer_uids``: only processes of these uids may talk on the unix socket (checked with
    SO_PEERCRED at accept); None: whoever the socket's permissions let connect.

    ``proxy_headers``: uvicorn's X-Forwarded-* middleware (the client address from a trusted
    proxy's headers); off for an app that reads neither the client address nor the scheme.
    """
    serve_tcp = host is not None and port is not None
    if uds is None and not serve_tcp:
        raise UsageError(f"{name}: serving needs a unix socket path, a TCP port, or both")
    sockets: list[socket.socket] = []
    bound_uds: Path | None = None
    try:
        if serve_tcp:
            assert host is not None and port is not None
            sockets.append(bind_tcp(host, port))
        if uds is not None:
            sockets.append(bind_uds(uds))
            bound_uds = uds
        config = uvicorn.Config(
            app,
            lifespan="on",
            log_level=log_level,
            access_log=False,
            proxy_headers=proxy_headers,
            http=_head_timed(
                _protocol(http) if peer_uids is None else _peer_checked(_protocol(http), peer_uids),
                head_timeout_s,
            ),
            ws="none",
            loop="none",
            timeout_graceful_shutdown=int(_STOP_TIMEOUT_S),
            timeout_keep_alive=keep_alive_s,
        )
        server = _EmbeddedServer(config)
        task = asyncio.create_task(server.serve(sockets=sockets), name=f"synthorg-{name}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _START_TIMEOUT_S
        while not server.started:
            if task.done() or loop.time() > deadline:
                server.should_exit = True
                with contextlib.suppress(Exception, SystemExit):  # uvicorn exits on failure
                    await task
                raise BoundaryError(f"the {name} server failed to start (see its log)")
            await asyncio.sleep(0.005)
        tcp = None
        if serve_tcp:
            assert host is not None
            tcp = (host, int(sockets[0].getsockname()[1]))
        try:
            yield Listeners(tcp=tcp, uds=bound_uds)
        finally:
            server.should_exit = True
            try:
                await asyncio.wait_for(asyncio.shield(task), _STOP_TIMEOUT_S * 2)
            except TimeoutError:
                server.force_exit = True
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        for sock in sockets:
            sock.close()
        if bound_uds is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(bound_uds)


def _protocol(http: str) -> type[asyncio.Protocol]:
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    protocol: type[asyncio.Protocol] = import_from_string(HTTP_PROTOCOLS[http])
    return protocol


class LazyAsgi:
    """An ASGI app that is built on first need, with its imports done in a worker thread.

    For an embedded server whose app is costly to import and rarely needed at once (the MCP
    server: ~1 s of ``mcp`` imports, used only by runs of projects with credentialed tools).
    The listener exists from the start, so nothing that connects early is refused; a request
    that arrives before the app is built waits for it. ``warm()`` starts building in the
    background. The built app's own lifespan runs exactly as uvicorn would run it, and ends
    with the server's.
    """

    def __init__(self, imports: tuple[str, ...], build: Callable[[], Any], *, name: str) -> None:
        self._imports = imports
        self._build = build
        self._name = name
        self._task: asyncio.Task[Any] | None = None
        self._inner_lifespan: asyncio.Task[None] | None = None
        self._to_inner: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._from_inner: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    @property
    def started(self) -> bool:
        """Whether building the app has begun (by ``warm()`` or a request)."""
        return self._task is not None

    def warm(self) -> None:
        """Start building the app in the background (idempotent; needs a running loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._start(), name=f"synthorg-{self._name}-build")

    async def app(self) -> Any:
        """The built app, building it now if nothing has started to."""
        self.warm()
        assert self._task is not None
        task = self._task
        try:
            return await asyncio.shield(task)
        except Exception:
            if self._task is task:
                self._task = None  # a later request tries again
            raise

    async def _start(self) -> Any:
        # Imports in a thread: the event loop keeps serving while ~1 s of modules load.
        await asyncio.to_thread(_import_all, self._imports)
        inner = self._build()
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        self._inner_lifespan = asyncio.create_task(
            inner(scope, self._to_inner.get, self._from_inner.put),
            name=f"synthorg-{self._name}-lifespan",
        )
        await self._to_inner.put({"type": "lifespan.startup"})
        reply = asyncio.ensure_future(self._from_inner.get())
        await asyncio.wait((reply, self._inner_lifespan), return_when=asyncio.FIRST_COMPLETED)
        if not reply.done():  # the lifespan ended without answering
            reply.cancel()
            raise BoundaryError(f"the {self._name} app failed to start (see its log)")
        if reply.result()["type"] != "lifespan.startup.complete":
            message = reply.result().get("message")
            raise BoundaryError(f"the {self._name} app failed to start: {message}")
        return inner

    async def close(self) -> None:
        """End the built app's lifespan (or its build); the server's shutdown calls it."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        if task is not None:
            with contextlib.suppress(BaseException):
                await task
        lifespan = self._inner_lifespan
        if lifespan is None or lifespan.done():
            return
        await self._to_inner.put({"type": "lifespan.shutdown"})
        try:
            async with asyncio.timeout(_STOP_TIMEOUT_S):
                await self._from_inner.get()
                await lifespan
        except TimeoutError:
            lifespan.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lifespan

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()  # lifespan.startup: the listener may open before the app exists
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            await self.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        inner = await self.app()
        await inner(scope, receive, send)


_LAZY_IMPORTS = threading.Lock()


@contextlib.contextmanager
def lazy_imports() -> Iterator[None]:
    """Hold while importing a package that loads lazily (``LazyAsgi`` builds, first use).

    Two threads importing the modules of one package that import each other (``mcp``: the
    MCP app's build in a worker thread, a run's MCP client on the event loop) can each be
    handed the other's half-initialised module, and an import then fails with "partially
    initialized module". Under this lock the second waits for the first to finish instead.
    """
    with _LAZY_IMPORTS:
        yield


def _import_all(modules: tuple[str, ...]) -> None:
    with lazy_imports():
        for module in modules:
            importlib.import_module(module)
