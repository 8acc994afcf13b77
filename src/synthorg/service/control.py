"""Live control decisions: steer, start or record a message; pause / interrupt / resume / cancel.

Routers and the WebSocket stream stay thin: they call these with the caller's identity and
report the outcome; which of steer / start / record applies is decided here, once.
"""

from __future__ import annotations

from typing import Literal

from synthorg.domain import ConversationStatus, MessageEvent
from synthorg.errors import ConflictError
from synthorg.service.protocol import RunService
from synthorg.store.protocol import ConversationStore

Delivery = Literal["steered", "started", "recorded"]
"""What happened to a message: steered into the active run, started a run, or only logged."""

ControlAction = Literal["pause", "interrupt", "resume", "cancel"]
"""A control command on a conversation's run."""


async def deliver_message(
    service: RunService, store: ConversationStore, conversation_id: str, text: str, *, run: bool
) -> Delivery:
    """Steer the active run, or start a run with the message (``run``), or just record it."""
    await store.get_conversation(conversation_id)  # NotFoundError before anything else
    if service.is_active(conversation_id):
        await service.steer(conversation_id, text)
        return "steered"
    if run:
        # The service refuses (ConflictError) a run that raced us to the start line.
        await service.start(conversation_id, message=text)
        return "started"
    await store.append(conversation_id, MessageEvent(role="user", text=text))
    return "recorded"


async def control_run(
    service: RunService,
    store: ConversationStore,
    conversation_id: str,
    action: ControlAction,
    *,
    by: str,
) -> ConversationStatus:
    """Apply ``action`` for the principal ``by``; the conversation's status afterwards."""
    record = await store.get_conversation(conversation_id)
    active = service.is_active(conversation_id)
    if action == "resume":
        if active:
            raise ConflictError(f"conversation {conversation_id} is already running")
        await service.start(conversation_id)
    elif not active:
        raise ConflictError(
            f"conversation {conversation_id} has no active run to {action} "
            f"(it is {record.status.value})"
        )
    elif action == "pause":
        await service.pause(conversation_id, by=by)
    elif action == "interrupt":
        await service.interrupt(conversation_id, by=by)
    else:
        await service.cancel(conversation_id, by=by)
    return (await store.get_conversation(conversation_id)).status
