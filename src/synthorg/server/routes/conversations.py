"""Conversation routes: create, list, count, get, delete. The run service does the work."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import JSONResponse

from synthorg.domain import ConversationStatus
from synthorg.domain.ids import Identifier
from synthorg.forge.links import ConversationForge
from synthorg.forge.triggers import TRIGGER_EVENTS, TriggerName
from synthorg.server.auth import Principal
from synthorg.server.errors import responses
from synthorg.server.state import IdempotencyKey, Operator, ServerState, State, Viewer
from synthorg.server.wire import (
    ConversationList,
    ConversationView,
    Count,
    CreateConversation,
    Deleted,
)
from synthorg.service.tree import RunNode, TreeStore, run_tree
from synthorg.store.codec import CURSOR_PATTERN, SEARCH_MAX_CHARS

router = APIRouter(prefix="/api/conversations", tags=["conversations"])

Search = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=SEARCH_MAX_CHARS,
        pattern=r"^[^\x00]+$",
        description="Only conversations whose task text contains this (ASCII letters match "
        "case-insensitively). Searches the whole store, not one page; paging works as usual.",
    ),
]

Trigger = Annotated[
    TriggerName | None,
    Query(description="Only conversations a forge delivery of this trigger started or resumed."),
]


@router.post(
    "",
    status_code=201,
    response_model=ConversationView,
    responses=responses(400, 401, 403, 404, 409),
)
async def create_conversation(
    body: CreateConversation,
    state: State,
    principal: Operator,
    idempotency_key: IdempotencyKey = None,
) -> ConversationView | JSONResponse:
    """Create a conversation (and its worktree); start it unless ``start`` is false."""
    return await state.idempotency.once(
        caller=principal.key_id,
        route="create",
        key=idempotency_key,
        request=body,
        status=201,
        call=lambda: _create(body, state, principal),
    )


async def _create(
    body: CreateConversation, state: ServerState, principal: Principal
) -> ConversationView:
    task = body.task()
    if not principal.sees(task.project_id):
        raise HTTPException(
            403, f"{principal.name}'s key is not scoped to project {task.project_id}"
        )
    service = state.service
    record = await service.create(task, body.options())
    state.metrics.commands.labels("create").inc()
    if body.start:
        await state.start_run(record.id)
        record = await state.store.get_conversation(record.id)
    return ConversationView.of(record, active=service.is_active(record.id))


@router.get("", response_model=ConversationList, responses=responses(400, 401, 403))
async def list_conversations(
    state: State,
    principal: Viewer,
    status: ConversationStatus | None = None,
    project: Identifier | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN)] = None,
    search: Search = None,
    trigger: Trigger = None,
) -> ConversationList:
    """Conversations newest first, filtered by status, project, task text and forge trigger;
    pass next_cursor on (with the same filters)."""
    page = await state.store.list_conversations(
        status=status,
        project_id=state.project_filter(principal, project),
        limit=min(limit, state.settings.page_limit_max),
        cursor=cursor,
        search=search,
        forge_events=TRIGGER_EVENTS[trigger] if trigger else (),
    )
    return ConversationList(
        items=[ConversationView.of(r, active=state.service.is_active(r.id)) for r in page.items],
        next_cursor=page.next_cursor,
    )


@router.get("/count", response_model=Count, responses=responses(401, 403))
async def count_conversations(
    state: State,
    principal: Viewer,
    status: ConversationStatus | None = None,
    project: Identifier | None = None,
    search: Search = None,
    trigger: Trigger = None,
) -> Count:
    """How many conversations match the filters."""
    count = await state.store.count_conversations(
        status=status,
        project_id=state.project_filter(principal, project),
        search=search,
        forge_events=TRIGGER_EVENTS[trigger] if trigger else (),
    )
    return Count(count=count)


@router.get(
    "/{conversation_id}", response_model=ConversationView, responses=responses(401, 403, 404)
)
async def get_conversation(
    conversation_id: Identifier, state: State, principal: Viewer
) -> ConversationView:
    """Status, loop, usage, branch and termination of one conversation."""
    record = await state.conversation(conversation_id, principal)
    return ConversationView.of(record, active=state.service.is_active(conversation_id))


@router.get(
    "/{conversation_id}/forge",
    response_model=ConversationForge | None,
    responses=responses(401, 403, 404),
)
async def conversation_forge(
    conversation_id: Identifier, state: State, principal: Viewer
) -> ConversationForge | None:
    """The forge project, triggers, issue and pull request of a conversation that forge
    deliveries drove (null otherwise); a URL is present only once checked against the forge."""
    record = await state.conversation(conversation_id, principal)
    return None if state.forge is None else await state.forge.links.of(record.id)


@router.get("/{conversation_id}/tree", response_model=RunNode, responses=responses(401, 403, 404))
async def conversation_tree(
    conversation_id: Identifier, state: State, principal: Viewer
) -> RunNode:
    """The conversation and the runs it delegated (recursively): status and ledger spend."""
    await state.conversation(conversation_id, principal)
    if not isinstance(state.store, TreeStore):  # every real backend serves the ledger too
        raise HTTPException(501, "this server's store keeps no cost ledger")
    return await run_tree(state.store, conversation_id)


@router.delete(
    "/{conversation_id}", response_model=Deleted, responses=responses(401, 403, 404, 409)
)
async def delete_conversation(
    conversation_id: Identifier,
    state: State,
    principal: Operator,
    delete_branch: bool = False,
) -> Deleted:
    """Remove the conversation, its events and its worktree (a root: its whole delegation tree);
    refused while a run is active. The ledger keeps every run's spend."""
    await state.conversation(conversation_id, principal)  # 404 for what the key cannot see
    await state.service.delete(conversation_id, delete_branch=delete_branch)
    return Deleted(id=conversation_id, deleted=True)
