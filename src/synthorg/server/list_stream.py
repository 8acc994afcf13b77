"""The conversation-list WebSocket: a ``changed`` frame whenever conversations are created,
change or are deleted, so a list re-reads its page when told instead of polling.

The frame carries no ids (the reader re-reads its page and count under its own filters); a
key scoped to projects is told only of changes to its projects' conversations.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import WebSocket
from pydantic import ValidationError

from synthorg.errors import NotFoundError
from synthorg.server.state import ServerState
from synthorg.server.stream import INBOUND, Authenticated, AuthFrame, Close, EventStream
from synthorg.store.tail import ANY

LIST_STREAM = "(conversations)"
"""The subscriber-limit key (and log label) of list sockets: they share one cap."""

COALESCE_S = 0.25
"""At most one ``changed`` frame per this many seconds: a busy run appends many events."""

_WAIT_S = 60.0
_VISIBLE_MAX = 10_000

LIST_WS_PROTOCOL = """
## WebSocket: `GET /api/conversations/ws`

Send `{"type": "auth", "token": "<API key>"}` first; receive `{"type": "subscribed"}`, then
`{"type": "changed"}` (at most one per 0.25 s) whenever a conversation the key can see is
created, changes (status, turns, usage, events) or is deleted: re-read the page. Close codes
as for the event socket (4401, 4429).
"""


class ListStream(EventStream):
    """``changed`` frames to one list socket; inbound frames other than auth are refused."""

    def __init__(self, websocket: WebSocket, state: ServerState, caller: Authenticated) -> None:
        super().__init__(websocket, state, LIST_STREAM, caller, 0)
        self._visible: set[str] = set()  # a scoped key's conversations seen changing

    async def _hello(self) -> str:
        return json.dumps({"type": "subscribed"})

    async def _pump(self) -> Close:
        with self.state.store.watch_changes() as watcher:
            while True:
                await watcher.wait(_WAIT_S)
                ids = watcher.take()
                # One queued and unsent 'changed' already says it all.
                if ids and self.queue.empty() and await self._sees_any(ids):
                    self.queue.put_nowait(json.dumps({"type": "changed"}))
                await asyncio.sleep(COALESCE_S)

    async def _sees_any(self, ids: set[str]) -> bool:
        """Whether the caller may learn that one of ``ids`` changed."""
        principal = self.principal
        if principal.projects is None or ANY in ids:
            return True
        for conversation_id in ids:
            try:
                record = await self.state.store.get_conversation(conversation_id)
            except NotFoundError:
                if conversation_id in self._visible:  # one of ours, deleted
                    return True
                continue
            if principal.sees(record.task.project_id):
                if len(self._visible) >= _VISIBLE_MAX:
                    self._visible.clear()
                self._visible.add(conversation_id)
                return True
        return False

    async def _handle(self, raw: str) -> dict[str, Any]:
        try:
            frame = INBOUND.validate_json(raw)
        except ValidationError:
            frame = None
        if isinstance(frame, AuthFrame):
            return {"type": "ack", "for": "auth", "principal": self.principal.name}
        return {
            "type": "error",
            "status": 400,
            "code": "bad_request",
            "detail": "the list socket takes no commands",
        }
