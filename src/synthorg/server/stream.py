"""One event WebSocket: history after a seq, then the live tail, with a bounded send queue.

Three tasks share the socket: the pump reads the store's tail (history, then live events,
exactly once and in seq order) into a bounded queue; the sender writes the queue to the
socket; the receiver handles inbound messages and control commands. When the queue stays
full for longer than the stall timeout the consumer is closed with ``CLOSE_SLOW`` and
reconnects with ``after=<last seq it received>``: memory per socket never exceeds the
queue plus one page of the tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from synthorg.errors import SynthOrgError
from synthorg.logging import get_logger
from synthorg.server.auth import Principal, Role
from synthorg.server.errors import status_of
from synthorg.server.routes.control import control, deliver_message
from synthorg.server.state import ServerState
from synthorg.server.wire import MESSAGE_MAX_CHARS

log = get_logger("synthorg.server")

CLOSE_SLOW = 4008
"""The consumer fell too far behind: reconnect with after=<last seq received>."""
CLOSE_UNAUTHORIZED = 4401
"""No valid auth frame first, or the key was revoked while the socket was open."""
CLOSE_NOT_FOUND = 4404
"""No such conversation."""
CLOSE_GONE = 4410
"""The conversation was deleted while being followed."""
CLOSE_BUSY = 4429
"""The conversation already has as many subscribers as allowed."""

WS_PROTOCOL = """
## WebSocket: `GET /api/conversations/{conversation_id}/events/ws?after=<seq>`

1. Send `{"type": "auth", "token": "<API key>"}` first (within 10 s).
2. Receive `{"type": "subscribed", "after": N, "last_seq": M}`, then every event with
   `seq > after` in order, then the live tail: `{"type": "event", "conversation_id", "seq",
   "timestamp", "event"}` (a StoredEvent), exactly once each.
3. Send at any time (operator role) `{"type": "message", "text": "...", "run": true}` or
   `{"type": "control", "action": "pause|interrupt|resume|cancel"}`; the answer is
   `{"type": "ack", ...}` or `{"type": "error", "status", "code", "detail"}`. The key is
   re-checked before every command and every 0.25 s.

Close codes: 4008 too slow (reconnect with `after=<last seq received>`), 4401 no valid auth
frame or key revoked, 4404 no such conversation, 4410 deleted, 4429 too many subscribers.
Details: docs/server.md; AsyncAPI: docs/asyncapi.yaml.
"""
"""The WebSocket protocol, as the OpenAPI description tells it."""

_CLOSE_TIMEOUT_S = 2.0
KEY_RECHECK_S = 0.25
"""How often an open socket re-checks its key: a revoked key loses the socket within 1 s."""


class AuthFrame(BaseModel):
    """The first frame a client must send."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["auth"] = Field(description="Always 'auth'.")
    token: str = Field(min_length=1, description="An API key.")


class MessageFrame(BaseModel):
    """A message for the agent (steers a running conversation)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["message"] = Field(description="Always 'message'.")
    text: str = Field(min_length=1, max_length=MESSAGE_MAX_CHARS, description="The message.")
    run: bool = Field(default=True, description="Start a run with it when none is active.")


class ControlFrame(BaseModel):
    """A run control command."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["control"] = Field(description="Always 'control'.")
    action: Literal["pause", "interrupt", "resume", "cancel"] = Field(description="The command.")


Inbound = Annotated[AuthFrame | MessageFrame | ControlFrame, Field(discriminator="type")]
INBOUND: TypeAdapter[AuthFrame | MessageFrame | ControlFrame] = TypeAdapter(Inbound)


@dataclass(frozen=True)
class Close:
    """How the server ends a socket."""

    code: int
    reason: str


@dataclass(frozen=True)
class Authenticated:
    """The caller of a socket, and the key it authenticated with (re-checked while open)."""

    principal: Principal
    token: str


async def authenticate(websocket: WebSocket, state: ServerState) -> Authenticated | None:
    """Read the auth frame; None (after closing the socket) when it is missing or invalid."""
    try:
        async with asyncio.timeout(state.settings.ws_auth_timeout_s):
            raw = await websocket.receive_text()
        frame = INBOUND.validate_json(raw)
    except TimeoutError:
        await close(websocket, Close(CLOSE_UNAUTHORIZED, "no auth frame in time"))
        return None
    except (ValidationError, KeyError):
        await close(websocket, Close(CLOSE_UNAUTHORIZED, 'first frame must be {"type":"auth",...}'))
        return None
    except WebSocketDisconnect:
        return None
    client = websocket.client.host if websocket.client else "unknown"
    try:
        principal = state.check_key(frame.token, client) if isinstance(frame, AuthFrame) else None
    except HTTPException as limited:  # this address failed too often (the key was not read)
        await close(websocket, Close(CLOSE_UNAUTHORIZED, str(limited.detail)))
        return None
    if principal is None:
        reason = (
            "invalid or revoked API key"
            if isinstance(frame, AuthFrame)
            else ('first frame must be {"type":"auth","token":...}')
        )
        await close(websocket, Close(CLOSE_UNAUTHORIZED, reason))
        return None
    assert isinstance(frame, AuthFrame)
    return Authenticated(principal, frame.token)


async def close(websocket: WebSocket, how: Close) -> None:
    """Close with a code, never hanging on a peer that stopped reading."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(_CLOSE_TIMEOUT_S):
            await websocket.close(how.code, how.reason[:120])


class EventStream:
    """History after ``after``, then the live tail, to one socket; inbound frames handled."""

    def __init__(
        self,
        websocket: WebSocket,
        state: ServerState,
        conversation_id: str,
        caller: Authenticated,
        after: int,
    ) -> None:
        self.websocket = websocket
        self.state = state
        self.conversation_id = conversation_id
        self.caller = caller
        self.principal = caller.principal
        self.after = after
        self.queued_seq = after
        self.queue: asyncio.Queue[str] = asyncio.Queue(maxsize=state.settings.ws_send_queue)

    async def run(self) -> None:
        """Serve until the client leaves, the consumer stalls or the conversation goes."""
        self.queue.put_nowait(await self._hello())
        tasks = {
            asyncio.create_task(self._pump(), name="ws-pump"),
            asyncio.create_task(self._send(), name="ws-send"),
            asyncio.create_task(self._receive(), name="ws-receive"),
            asyncio.create_task(self._watch_key(), name="ws-key"),
        }
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        outcome = next(iter(done)).result()
        if isinstance(outcome, Close):
            self.state.metrics.ws_closed.labels(str(outcome.code)).inc()
            log.info(
                "WS_CLOSED",
                conversation_id=self.conversation_id,
                code=outcome.code,
                reason=outcome.reason,
            )
            await close(self.websocket, outcome)

    async def _hello(self) -> str:
        """The first frame: what the socket is subscribed to."""
        last = await self.state.store.last_seq(self.conversation_id)
        return json.dumps({"type": "subscribed", "after": self.after, "last_seq": last})

    async def _offer(self, frame: str) -> bool:
        """Queue a frame; False when the consumer stayed behind past the stall timeout."""
        try:
            self.queue.put_nowait(frame)
            return True
        except asyncio.QueueFull:
            pass
        try:
            async with asyncio.timeout(self.state.settings.ws_stall_timeout_s):
                await self.queue.put(frame)
        except TimeoutError:
            return False
        return True

    async def _pump(self) -> Close:
        events = self.state.store.tail(self.conversation_id, after=self.after)
        try:
            async for stored in events:
                # '{"type":"event",' + the rest of the StoredEvent object, without re-parsing.
                frame = '{"type":"event",' + stored.model_dump_json()[1:]
                if not await self._offer(frame):
                    return Close(
                        CLOSE_SLOW,
                        f"consumer too slow: reconnect with after=<last seq received> "
                        f"(queued up to {self.queued_seq})",
                    )
                self.queued_seq = stored.seq
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
        return Close(CLOSE_GONE, "conversation deleted")

    async def _send(self) -> None:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            while True:
                frame = await self.queue.get()
                await self.websocket.send_text(frame)
                self.state.metrics.ws_frames.inc()

    def _revoked(self) -> Close | None:
        if self.state.auth.authenticate(self.caller.token) is None:
            return Close(CLOSE_UNAUTHORIZED, "API key revoked")
        return None

    async def _watch_key(self) -> Close:
        """Close the socket once its key stops authenticating (revoked, or removed)."""
        while True:
            await asyncio.sleep(KEY_RECHECK_S)
            revoked = await asyncio.to_thread(self._revoked)
            if revoked is not None:
                return revoked

    async def _receive(self) -> Close | None:
        while True:
            try:
                raw = await self.websocket.receive_text()
            except (WebSocketDisconnect, RuntimeError):
                return None
            # Every inbound frame is authorised afresh: a revoked key commands nothing.
            revoked = await asyncio.to_thread(self._revoked)
            if revoked is not None:
                return revoked
            reply = await self._handle(raw)
            if not await self._offer(json.dumps(reply)):
                return Close(CLOSE_SLOW, "consumer too slow: reconnect")

    async def _handle(self, raw: str) -> dict[str, Any]:
        try:
            frame = INBOUND.validate_json(raw)
        except ValidationError as exc:
            return _error(400, "bad_request", f"unknown or invalid frame: {exc.errors()[0]['msg']}")
        if isinstance(frame, AuthFrame):
            return {"type": "ack", "for": "auth", "principal": self.principal.name}
        if not self.principal.can(Role.OPERATOR):
            return _error(403, "forbidden", f"{self.principal.name} lacks the operator role")
        try:
            if isinstance(frame, MessageFrame):
                delivery = await deliver_message(
                    self.state, self.conversation_id, frame.text, self.principal, run=frame.run
                )
                return {"type": "ack", "for": "message", "delivery": delivery}
            result = await control(self.state, self.conversation_id, frame.action, self.principal)
            return {"type": "ack", "for": "control", **result.model_dump(mode="json")}
        except SynthOrgError as exc:
            status, code = status_of(exc)
            return _error(status, code, str(exc))


def _error(status: int, code: str, detail: str) -> dict[str, Any]:
    return {"type": "error", "status": status, "code": code, "detail": detail}
