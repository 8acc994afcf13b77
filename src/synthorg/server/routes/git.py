"""Read-only git views of a conversation's workspace: changes, diff, commits."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query

from synthorg.domain.ids import Identifier
from synthorg.errors import ConflictError
from synthorg.server.errors import responses
from synthorg.server.state import ServerState, State, Viewer
from synthorg.server.wire import Changes, Commits, Diff
from synthorg.workspace import views
from synthorg.workspace.models import Workspace
from synthorg.workspace.repo import probe_repo

router = APIRouter(prefix="/api/conversations/{conversation_id}", tags=["git"])


async def workspace_of(state: ServerState, conversation_id: str) -> Workspace:
    """The conversation's git workspace, rebuilt from its record; 409 when there is none."""
    record = await state.store.get_conversation(conversation_id)
    info = record.workspace
    if info is None:
        raise ConflictError(f"conversation {conversation_id} has no workspace yet")
    path = Path(info.path)
    if not path.is_dir():  # noqa: ASYNC240 - one stat of a local dir; cheaper than a thread hop
        raise ConflictError(f"the workspace of {conversation_id} ({path}) no longer exists")
    probe = await probe_repo(path)
    if isinstance(probe, str):
        raise ConflictError(f"the workspace of {conversation_id} has no git views: {probe}")
    return Workspace(
        conversation_id=conversation_id,
        path=path,
        repo=probe.toplevel,
        branch=info.branch,
        base_ref=info.base_ref,
        is_worktree=info.is_worktree,
        git_dir=probe.git_dir,
        common_dir=probe.common_dir,
    )


@router.get("/changes", response_model=Changes, responses=responses(401, 403, 404, 409))
async def get_changes(conversation_id: Identifier, state: State, principal: Viewer) -> Changes:
    """Every path that differs between the base ref and the worktree."""
    return Changes(items=await views.changes(await workspace_of(state, conversation_id)))


@router.get("/diff", response_model=Diff, responses=responses(401, 403, 404, 409))
async def get_diff(
    conversation_id: Identifier,
    state: State,
    principal: Viewer,
    path: Annotated[str | None, Query(min_length=1, max_length=4096, pattern=r"^[^\x00]+$")] = None,
) -> Diff:
    """Unified diff from the base ref to the worktree, whole or for one path."""
    ws = await workspace_of(state, conversation_id)
    return Diff(path=path, diff=await views.diff(ws, path))


@router.get("/commits", response_model=Commits, responses=responses(401, 403, 404, 409))
async def get_commits(conversation_id: Identifier, state: State, principal: Viewer) -> Commits:
    """Commits on the conversation's branch since its base, newest first."""
    return Commits(items=await views.commits(await workspace_of(state, conversation_id)))
