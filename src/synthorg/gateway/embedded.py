"""Serve the gateway app in the running event loop on a unix socket and/or TCP."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synthorg.serving import serve_asgi


@dataclass(frozen=True)
class Endpoints:
    """Where an embedded gateway listens."""

    tcp_base_url: str | None
    """``http://127.0.0.1:<port>/v1`` when serving TCP."""
    uds_path: Path | None
    """The unix socket path when serving one (base URL ``http://localhost/v1`` over it)."""


@contextlib.asynccontextmanager
async def serve_embedded(
    app: Any,
    *,
    uds: Path | None = None,
    tcp_port: int | None = None,
    host: str = "127.0.0.1",
    log_level: str = "warning",
) -> AsyncIterator[Endpoints]:
    """Serve ``app`` until the block exits; ``tcp_port=0`` picks a free port.

    Without uvicorn's proxy-headers middleware: the gateway reads neither the client's
    address nor the scheme (a bearer is what identifies a caller), and the middleware is one
    more coroutine frame on every resumption of every request."""
    async with serve_asgi(
        app,
        name="gateway",
        uds=uds,
        host=host,
        port=tcp_port,
        log_level=log_level,
        proxy_headers=False,
    ) as listeners:
        yield Endpoints(tcp_base_url=listeners.http_url("/v1"), uds_path=listeners.uds)
