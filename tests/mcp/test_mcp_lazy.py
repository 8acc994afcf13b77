"""The MCP app built on first need (``LazyAsgi``): a server boots without the ``mcp`` library."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
from mcp_world import World

from synthorg.errors import BoundaryError
from synthorg.mcp import McpToolClient, create_mcp_app, serve_mcp
from synthorg.serving import LazyAsgi


def _uds() -> Path:
    return Path(f"/tmp/synthorg-mcp-lazy-{os.getpid()}-{time.monotonic_ns()}.sock")


async def test_the_first_request_builds_the_app_and_is_answered(world: World) -> None:
    def build() -> object:
        return create_mcp_app(world.config, world.signer, world.vault, world.audit)

    lazy = LazyAsgi(("synthorg.mcp.server",), build, name="mcp")
    async with serve_mcp(lazy, uds=_uds(), host="127.0.0.1", port=0) as ends:
        assert not lazy.started
        assert ends.url is not None
        # The streamable HTTP session manager runs in the app's own lifespan: a listing
        # through it proves that lifespan was started for the lazily built app.
        specs = await McpToolClient(ends.url, world.bearer()).list_tools()
        assert "git_push" in {spec.name for spec in specs}
        assert lazy.started
        # Concurrent callers share the one build.
        many = await asyncio.gather(
            *(McpToolClient(ends.url, world.bearer()).list_tools() for _ in range(4))
        )
        assert all(len(listed) == len(specs) for listed in many)


async def test_a_failed_build_is_retried_by_the_next_request() -> None:
    attempts: list[int] = []

    async def ok_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"  # a minimal app: a lifespan and nothing else
        await receive()
        await send({"type": "lifespan.startup.complete"})
        await receive()
        await send({"type": "lifespan.shutdown.complete"})

    def build() -> object:
        attempts.append(1)
        if len(attempts) == 1:
            raise BoundaryError("first build fails")
        return ok_app

    lazy = LazyAsgi(("json",), build, name="probe")
    with pytest.raises(BoundaryError, match="first build fails"):
        await lazy.app()
    assert not lazy.started  # forgotten, so the next request builds again
    assert await lazy.app() is ok_app
    assert len(attempts) == 2
    await lazy.close()
