"""Event history: pages of the durable log by seq or by time, filtered by kind."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from synthorg.domain import SEQ_MAX
from synthorg.domain.events import EventKind
from synthorg.domain.ids import Identifier
from synthorg.server.errors import responses
from synthorg.server.state import State, Viewer
from synthorg.server.wire import EventPage

router = APIRouter(prefix="/api/conversations/{conversation_id}", tags=["events"])


@router.get("/events", response_model=EventPage, responses=responses(400, 401, 403, 404))
async def list_events(
    conversation_id: Identifier,
    state: State,
    principal: Viewer,
    after: Annotated[int | None, Query(ge=0, le=SEQ_MAX, description="Only seq > after.")] = None,
    before: Annotated[
        int | None,
        Query(ge=1, le=SEQ_MAX, description="Only seq < before (alone: the page just before)."),
    ] = None,
    since: Annotated[
        datetime | None, Query(description="Only events at or after this time.")
    ] = None,
    kind: Annotated[list[EventKind] | None, Query(description="Only these kinds.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EventPage:
    """A page of the event log in seq order; follow ``next_after`` for the next page."""
    await state.conversation(conversation_id, principal)  # 404: unknown, or another project's
    last = await state.store.last_seq(conversation_id)
    items = await state.store.history(
        conversation_id,
        after=after,
        before=before,
        since=since,
        kinds=frozenset(kind) if kind else None,
        limit=min(limit, state.settings.page_limit_max),
    )
    full = len(items) == min(limit, state.settings.page_limit_max)
    return EventPage(
        items=items, last_seq=last, next_after=items[-1].seq if items and full else None
    )
