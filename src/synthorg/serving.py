"""Serve an ASGI app inside the running event loop, on a unix socket and/or loopback TCP.

The gateway, the MCP server and tests embed their servers this way: the host process keeps
its own signal handlers, a unix socket is created 0600 (only this user, and what it forwards
into a sandbox, may connect) and removed on exit, and port 0 picks a free port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import uvicorn

from synthorg.errors import BoundaryError, UsageError

_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0
KEEP_ALIVE_S = 75
"""How long an idle keep-alive connection stays open: well past httpx's pool expiry (5 s) and
aiohttp's (15 s), so a client never reuses a connection the server is closing (uvicorn's own
default is exactly httpx's 5 s, which raced)."""


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
) -> AsyncIterator[Listeners]:
    """Serve ``app`` until the block exits. ``port=None`` (or ``host=None``) means no TCP."""
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
            http=http,
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
