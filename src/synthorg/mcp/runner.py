"""The embedded runner: serves the MCP app with uvicorn on a unix socket and/or loopback TCP."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from starlette.types import ASGIApp

from synthorg.mcp.config import MCP_PATH
from synthorg.serving import serve_asgi


@dataclass(frozen=True, slots=True)
class McpEndpoints:
    """Where a running MCP server listens."""

    url: str | None
    """The loopback TCP endpoint URL (``http://127.0.0.1:<port>/mcp``), None if not served."""
    uds: Path | None
    """The unix socket path (to forward into a sandbox), None if not served."""
    path: str = MCP_PATH
    """The HTTP path of the endpoint (on either listener)."""


@contextlib.asynccontextmanager
async def serve_mcp(
    app: ASGIApp,
    *,
    uds: Path | None = None,
    host: str | None = "127.0.0.1",
    port: int = 0,
) -> AsyncIterator[McpEndpoints]:
    """Serve ``app`` until the block exits; yields the endpoints (port 0 picks a free one)."""
    # h11: the streamable HTTP transport streams responses; httptools gains nothing here.
    async with serve_asgi(app, name="mcp", uds=uds, host=host, port=port, http="h11") as ends:
        yield McpEndpoints(url=ends.http_url(MCP_PATH), uds=ends.uds)
