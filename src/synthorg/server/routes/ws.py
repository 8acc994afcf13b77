"""The event WebSocket route: auth frame first, then history and the live tail."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, WebSocket

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


@router.websocket("/api/conversations/ws")
async def conversations_ws(websocket: WebSocket) -> None:
    """Send ``{"type":"auth","token":...}`` first; then ``{"type":"changed"}`` on changes."""
    state: ServerState = websocket.app.state.server
    await websocket.accept()
    caller = await authenticate(websocket, state)
    if caller is None:
        return
    try:
        state.subscribers.acquire(LIST_STREAM)
    except ConflictError as exc:
        await close(websocket, Close(CLOSE_BUSY, str(exc)))
        return
    try:
        await ListStream(websocket, state, caller).run()
    finally:
        state.subscribers.release(LIST_STREAM)


@router.websocket("/api/conversations/{conversation_id}/events/ws")
async def events_ws(
    websocket: WebSocket,
    conversation_id: str,
    after: Annotated[int, Query(ge=0)] = 0,
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
    try:
        state.subscribers.acquire(conversation_id)
    except ConflictError as exc:
        await close(websocket, Close(CLOSE_BUSY, str(exc)))
        return
    try:
        await EventStream(websocket, state, conversation_id, caller, after).run()
    finally:
        state.subscribers.release(conversation_id)
