"""Read-only git views of a conversation's workspace: changes, diff, commits."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query

from synthorg.domain.ids import Identifier
from synthorg.errors import ConflictError, UsageError
from synthorg.server.auth import Principal
from synthorg.server.errors import responses
from synthorg.server.state import ServerState, State, Viewer
from synthorg.server.wire import Changes, Commits, Diff
from synthorg.workspace import views
from synthorg.workspace.models import Workspace
from synthorg.workspace.worktrees import recorded_workspace

_SEGMENT = r"(?:[^/\x00.][^/\x00]*|\.[^/\x00.][^/\x00]*|\.\.[^/\x00]+)"
RELATIVE_PATH = rf"^{_SEGMENT}(?:/{_SEGMENT})*$"
"""A worktree-relative path: segments that are not empty, '.' or '..'; no leading '/'."""
_RELATIVE = re.compile(RELATIVE_PATH)

router = APIRouter(prefix="/api/conversations/{conversation_id}", tags=["git"])


async def workspace_of(state: ServerState, conversation_id: str, principal: Principal) -> Workspace:
    """The conversation's worktree as recorded on the host (never discovered from its files);
    409 when there is none."""
    record = await state.conversation(conversation_id, principal)
    info = record.workspace
    if info is None:
        raise ConflictError(f"conversation {conversation_id} has no workspace yet")
    if not info.is_worktree:
        raise ConflictError(
            f"the workspace of {conversation_id} has no git views: it is edited in place"
        )
    ws = recorded_workspace(Path(info.path), conversation_id)
    if ws is None:
        raise ConflictError(f"the worktree of {conversation_id} no longer exists")
    return ws


@router.get("/changes", response_model=Changes, responses=responses(401, 403, 404, 409))
async def get_changes(conversation_id: Identifier, state: State, principal: Viewer) -> Changes:
    """Every path that differs between the base ref and the worktree."""
    return Changes(items=await views.changes(await workspace_of(state, conversation_id, principal)))


@router.get("/diff", response_model=Diff, responses=responses(400, 401, 403, 404, 409))
async def get_diff(
    conversation_id: Identifier,
    state: State,
    principal: Viewer,
    path: Annotated[
        str | None,
        Query(
            max_length=4096,
            description="A path relative to the worktree root (no '..', not absolute).",
            # Documented here, enforced below: a bad path is a 400 naming the rule.
            json_schema_extra={"pattern": RELATIVE_PATH},
        ),
    ] = None,
) -> Diff:
    """Unified diff from the base ref to the worktree, whole or for one path."""
    if path is not None and not _RELATIVE.fullmatch(path):
        raise UsageError(
            "path must be relative to the worktree root: no leading '/', no '.' or '..' "
            "segments, no empty segments"
        )
    ws = await workspace_of(state, conversation_id, principal)
    return Diff(path=path, diff=await views.diff(ws, path))


@router.get("/commits", response_model=Commits, responses=responses(401, 403, 404, 409))
async def get_commits(conversation_id: Identifier, state: State, principal: Viewer) -> Commits:
    """Commits on the conversation's branch since its base, newest first."""
    return Commits(items=await views.commits(await workspace_of(state, conversation_id, principal)))
