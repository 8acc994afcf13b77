"""Serve an ASGI app (the gateway) in the running event loop on a unix socket and/or TCP."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from synthorg.errors import BoundaryError, UsageError


@dataclass(frozen=True)
class Endpoints:
    """Where an embedded server listens."""

    tcp_base_url: str | None
    """``http://127.0.0.1:<port>/v1`` when serving TCP."""
    uds_path: Path | None
    """The unix socket path when serving one (base URL ``http://localhost/v1`` over it)."""


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves the host's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _tcp_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _uds_socket(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, 0o600)  # only this user may reach the gateway through it
    return sock


@contextlib.asynccontextmanager
async def serve_embedded(
    app: Any,
    *,
    uds: Path | None = None,
    tcp_port: int | None = None,
    host: str = "127.0.0.1",
    log_level: str = "warning",
) -> AsyncIterator[Endpoints]:
    """Serve ``app`` until the block exits; ``tcp_port=0`` picks a free port."""
    if uds is None and tcp_port is None:
        raise UsageError("serve_embedded needs a unix socket path, a TCP port, or both")
    sockets: list[socket.socket] = []
    try:
        if tcp_port is not None:
            sockets.append(_tcp_socket(host, tcp_port))
        if uds is not None:
            sockets.append(_uds_socket(uds))
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise BoundaryError(f"cannot listen for the gateway: {exc}") from exc
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        http="httptools",
        loop="none",
        proxy_headers=False,
        timeout_graceful_shutdown=5,
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=sockets))
    try:
        while not server.started:
            if task.done():
                await task
                raise BoundaryError("the embedded gateway server stopped during start-up")
            await asyncio.sleep(0.005)
        tcp_url = None
        if tcp_port is not None:
            port = sockets[0].getsockname()[1]
            tcp_url = f"http://{host}:{port}/v1"
        yield Endpoints(tcp_base_url=tcp_url, uds_path=uds)
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for sock in sockets:
            sock.close()
        if uds is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(uds)
