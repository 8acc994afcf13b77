"""The WebSocket routes: auth frame first, then the event stream of one conversation (history
and the live tail) or the conversation list's change notices."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, WebSocket

from synthorg.domain import SEQ_MAX
from synthorg.errors import ConflictError, NotFoundError
from synthorg.server.list_stream import LIST_STREAM, ListStream
from synthorg.server.state import ServerState
from synthorg.server.stream import (
    CLOSE_BUSY,
    CLOSE_NOT_FOUND,
    Close,
    EventStream,
    authenticate,
    close,
)

router = APIRouter()


async def _serve(websocket: WebSocket, slot: str, stream: EventStream) -> None:
    """Run ``stream`` holding a subscriber slot of ``slot`` (4429 when none is left)."""
    try:
        stream.state.subscribers.acquire(slot)
    except ConflictError as exc:
        await close(websocket, Close(CLOSE_BUSY, str(exc)))
        return
    try:
        await stream.run()
    finally:
        stream.state.subscribers.release(slot)


@router.websocket("/api/conversations/ws")
async def conversations_ws(websocket: WebSocket) -> None:
    """Send ``{"type":"auth","token":...}`` first; then ``{"type":"changed"}`` on changes."""
    state: ServerState = websocket.app.state.server
    await websocket.accept()
    caller = await authenticate(websocket, state)
    if caller is not None:
        await _serve(websocket, LIST_STREAM, ListStream(websocket, state, caller))


@router.websocket("/api/conversations/{conversation_id}/events/ws")
async def events_ws(
    websocket: WebSocket,
    conversation_id: str,
    after: Annotated[int, Query(ge=0, le=SEQ_MAX)] = 0,
) -> None:
    """Send ``{"type":"auth","token":...}`` first; then events with seq > after arrive live."""
    state: ServerState = websocket.app.state.server
    await websocket.accept()
    caller = await authenticate(websocket, state)
    if caller is None:
        return
    try:
        await state.conversation(conversation_id, caller.principal)
    except NotFoundError:
        await close(websocket, Close(CLOSE_NOT_FOUND, f"no conversation {conversation_id}"))
        return
    stream = EventStream(websocket, state, conversation_id, caller, after)
    await _serve(websocket, conversation_id, stream)
