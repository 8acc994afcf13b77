"""A small event-WebSocket client for the tests (websockets library, loopback only)."""

from __future__ import annotations

import json
from typing import Any

from websockets.asyncio.client import ClientConnection, connect


def ws_url(base_url: str, conversation_id: str, after: int = 0) -> str:
    """The event WebSocket URL of a conversation."""
    host = base_url.removeprefix("http://")
    return f"ws://{host}/api/conversations/{conversation_id}/events/ws?after={after}"


async def open_stream(
    base_url: str, conversation_id: str, token: str | None, *, after: int = 0, **kwargs: Any
) -> ClientConnection:
    """Connect and send the auth frame (when a token is given)."""
    ws = await connect(ws_url(base_url, conversation_id, after), proxy=None, **kwargs)
    if token is not None:
        await ws.send(json.dumps({"type": "auth", "token": token}))
    return ws


async def next_frame(ws: ClientConnection, timeout: float = 10) -> dict[str, Any]:
    """The next JSON frame."""
    import asyncio

    raw = await asyncio.wait_for(ws.recv(), timeout)
    frame: dict[str, Any] = json.loads(raw)
    return frame


async def next_event(ws: ClientConnection, timeout: float = 10) -> dict[str, Any]:
    """The next event frame, skipping the others."""
    while True:
        frame = await next_frame(ws, timeout)
        if frame["type"] == "event":
            return frame
