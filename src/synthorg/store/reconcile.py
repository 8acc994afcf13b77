"""Restart reconciliation, written once against the store protocol for both backends."""

from __future__ import annotations

from synthorg.domain import (
    ActionEvent,
    ConversationRecord,
    ConversationStatus,
    ObservationEvent,
    StatusChangeEvent,
)
from synthorg.store.codec import RESTART_OBSERVATION, now
from synthorg.store.protocol import ConversationStore, ReconcileReport

_INTERRUPTED = (ConversationStatus.RUNNING, ConversationStatus.WAITING_CONFIRMATION)
_PAGE = 500


async def _interrupted(store: ConversationStore) -> list[ConversationRecord]:
    found: list[ConversationRecord] = []
    for status in _INTERRUPTED:
        cursor: str | None = None
        while True:
            page = await store.list_conversations(status=status, limit=_PAGE, cursor=cursor)
            found.extend(page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    return found


async def unmatched_actions(store: ConversationStore, conversation_id: str) -> list[str]:
    """Action ids of the conversation that have no observation, in log order."""
    pending: dict[str, None] = {}
    after = 0
    while True:
        batch = await store.history(
            conversation_id, after=after, kinds=frozenset({"action", "observation"}), limit=_PAGE
        )
        for stored in batch:
            event = stored.event
            if isinstance(event, ActionEvent):
                pending[event.action_id] = None
            elif isinstance(event, ObservationEvent):
                pending.pop(event.action_id, None)
        if len(batch) < _PAGE:
            return list(pending)
        after = batch[-1].seq


async def reconcile(store: ConversationStore) -> ReconcileReport:
    """Conversations left running by a dead process become error; their open tools fail.

    Only call this when no other process is running conversations on the same database:
    it cannot tell a dead owner from a live one.
    """
    errored: list[str] = []
    reconciled: list[tuple[str, str]] = []
    for record in await _interrupted(store):
        for action_id in await unmatched_actions(store, record.id):
            await store.append(
                record.id,
                ObservationEvent(
                    action_id=action_id,
                    content=RESTART_OBSERVATION,
                    is_error=True,
                    non_retryable=True,
                ),
            )
            reconciled.append((record.id, action_id))
        reason = "the server restarted while this conversation was running"
        await store.append(
            record.id,
            StatusChangeEvent(old=record.status, new=ConversationStatus.ERROR, reason=reason),
        )
        await store.save_conversation(
            record.model_copy(
                update={"status": ConversationStatus.ERROR, "error": reason, "updated_at": now()}
            )
        )
        errored.append(record.id)
    return ReconcileReport(
        conversations_errored=tuple(errored), actions_reconciled=tuple(reconciled)
    )
