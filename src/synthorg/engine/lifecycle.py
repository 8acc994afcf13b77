"""Status transitions of a conversation and paging through its whole log: one place for each.

Every status change goes through ``transition``: the StatusChangeEvent is appended and the
record saved with the new status, so the log and the record always agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from synthorg.domain import (
    ConversationRecord,
    ConversationStatus,
    StatusChangeEvent,
    StoredEvent,
    TerminationReason,
)
from synthorg.store.protocol import ConversationStore

HISTORY_PAGE = 1000
"""Events per history page when a whole log is read."""


async def transition(
    store: ConversationStore,
    conversation_id: str,
    new: ConversationStatus,
    why: str,
    *,
    clock: Callable[[], datetime],
    termination_reason: TerminationReason | None = None,
    update: Callable[[ConversationRecord], Mapping[str, Any]] | None = None,
    only_if_changed: bool = False,
) -> ConversationRecord:
    """Move the conversation to ``new``: its status event and its record in one transaction.

    ``update`` names the other fields to save, computed from the current record. This is the
    only place a run's status changes (the store's ``transition`` makes both writes atomic,
    so the log and the record never disagree, on either backend).
    """
    record = await store.get_conversation(conversation_id)
    if only_if_changed and record.status is new:
        return record
    event = StatusChangeEvent(
        old=record.status,
        new=new,
        reason=why,
        termination_reason=termination_reason.value if termination_reason else None,
    )
    fields: dict[str, Any] = {"status": new, "updated_at": clock()}
    if termination_reason is not None:
        fields["termination_reason"] = termination_reason
    if update is not None:
        fields.update(update(record))
    saved = record.model_copy(update=fields)
    await store.transition(saved, event)
    return saved


async def events_after(
    store: ConversationStore, conversation_id: str, after: int = 0
) -> tuple[StoredEvent, ...]:
    """Every event of the conversation with a sequence number above ``after``, in order."""
    events: list[StoredEvent] = []
    while True:
        page = await store.history(conversation_id, after=after, limit=HISTORY_PAGE)
        events.extend(page)
        if len(page) < HISTORY_PAGE:
            return tuple(events)
        after = page[-1].seq
