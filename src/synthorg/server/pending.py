"""Pending confirmation: the latest unresolved request of a conversation, read from its log."""

from __future__ import annotations

from synthorg.domain import (
    ConfirmationDecisionEvent,
    ConfirmationRequestEvent,
    ConversationRecord,
    ConversationStatus,
    ObservationEvent,
    PendingAction,
)
from synthorg.store.protocol import ConversationStore

_REQUEST = frozenset({"confirmation_request"})
_RESOLVING = frozenset({"confirmation_decision", "observation"})
_PAGE = 500


async def pending_actions(
    store: ConversationStore, record: ConversationRecord, *, active: bool
) -> tuple[int | None, list[PendingAction]]:
    """(seq of the latest request, its actions not yet decided or observed).

    Only a conversation with a live run (``active``) or one marked waiting for confirmation
    has pending actions: after a restart or a cancellation the old request is void, and a
    decision on it is refused as stale.
    """
    if not active and record.status is not ConversationStatus.WAITING_CONFIRMATION:
        return None, []
    last = await store.last_seq(record.id)
    latest = await store.history(record.id, before=last + 1, kinds=_REQUEST, limit=1)
    if not latest or not isinstance(latest[0].event, ConfirmationRequestEvent):
        return None, []
    request_seq = latest[0].seq
    pending = {action.action_id: action for action in latest[0].event.pending}
    after = request_seq
    while pending:
        batch = await store.history(record.id, after=after, kinds=_RESOLVING, limit=_PAGE)
        for stored in batch:
            event = stored.event
            if isinstance(event, ConfirmationDecisionEvent):
                for action_id in (*event.accepted, *event.rejected):
                    pending.pop(action_id, None)
            elif isinstance(event, ObservationEvent):
                pending.pop(event.action_id, None)
        if len(batch) < _PAGE:
            break
        after = batch[-1].seq
    return request_seq, list(pending.values())
