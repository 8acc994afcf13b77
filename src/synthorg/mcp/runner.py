"""The embedded runner: serves the MCP app with uvicorn on a unix socket and/or loopback TCP."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

from synthorg.errors import BoundaryError, UsageError
from synthorg.mcp.server import MCP_PATH

_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class McpEndpoints:
    """Where a running MCP server listens."""

    url: str | None
    """The loopback TCP endpoint URL (``http://127.0.0.1:<port>/mcp``), None if not served."""
    uds: Path | None
    """The unix socket path (to forward into a sandbox), None if not served."""
    path: str = MCP_PATH
    """The HTTP path of the endpoint (on either listener)."""


class _EmbeddedServer(uvicorn.Server):
    # The host process owns its signals; an embedded server must not take SIGINT/SIGTERM.
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _bind_tcp(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BoundaryError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _bind_uds(path: Path) -> socket.socket:
    if path.exists() or path.is_symlink():
        if not path.is_socket():
            raise UsageError(f"{path} exists and is not a socket; choose another --uds path")
        path.unlink()  # a stale socket of an earlier run
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise BoundaryError(f"cannot listen on unix socket {path}: {exc.strerror}") from exc
    os.chmod(path, 0o600)  # only this user (and what it forwards into a sandbox) may connect
    sock.listen(128)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def serve_mcp(
    app: ASGIApp,
    *,
    uds: Path | None = None,
    host: str | None = "127.0.0.1",
    port: int = 0,
) -> AsyncIterator[McpEndpoints]:
    """Serve ``app`` until the block exits; yields the endpoints (port 0 picks a free one)."""
    if uds is None and host is None:
        raise UsageError("serve_mcp needs a unix socket path, a TCP host, or both")
    sockets: list[socket.socket] = []
    bound_uds: Path | None = None
    try:
        if host is not None:
            sockets.append(_bind_tcp(host, port))
        if uds is not None:
            sockets.append(_bind_uds(uds))
            bound_uds = uds
        config = uvicorn.Config(
            app,
            lifespan="on",
            log_level="warning",
            access_log=False,
            http="h11",
            ws="none",
            timeout_graceful_shutdown=int(_STOP_TIMEOUT_S),
        )
        server = _EmbeddedServer(config)
        task = asyncio.create_task(server.serve(sockets=sockets), name="synthorg-mcp-server")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _START_TIMEOUT_S
        while not server.started:
            if task.done() or loop.time() > deadline:
                server.should_exit = True
                with contextlib.suppress(Exception, SystemExit):  # uvicorn exits on failure
                    await task
                raise BoundaryError("the MCP server failed to start (see its log)")
            await asyncio.sleep(0.01)
        url = None
        if host is not None:
            bound_port = sockets[0].getsockname()[1]
            shown = f"[{host}]" if ":" in host else host
            url = f"http://{shown}:{bound_port}{MCP_PATH}"
        try:
            yield McpEndpoints(url=url, uds=uds)
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
                os.unlink(bound_uds)  # a quick local syscall; no need for a thread
