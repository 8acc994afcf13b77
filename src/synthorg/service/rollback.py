"""Rolling a conversation's worktree back to a checkpoint, with no run in it meanwhile."""

from __future__ import annotations

from pathlib import Path

from synthorg.domain import CheckpointEvent, ConversationRecord, MessageEvent
from synthorg.errors import ConflictError
from synthorg.logging import get_logger
from synthorg.service.exclusive import Claim
from synthorg.service.repositories import RepositoryPolicy
from synthorg.store.protocol import Store
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.models import Workspace
from synthorg.workspace.remote import project_name
from synthorg.workspace.worktrees import WorktreeManager, recorded_workspace

_log = get_logger("synthorg.service")


class Rollback:
    """``LocalRunService.rollback``'s work, under the service's claim."""

    def __init__(
        self,
        *,
        store: Store,
        worktrees: WorktreeManager,
        checkpoints: CheckpointStore,
        repositories: RepositoryPolicy,
        claim: Claim,
    ) -> None:
        self._store = store
        self._worktrees = worktrees
        self._checkpoints = checkpoints
        self._repositories = repositories
        self._claim = claim

    async def __call__(self, conversation_id: str, n: int, *, by: str) -> None:
        """Restore the worktree to checkpoint ``n``; refused while a run is active.

        The conversation is claimed like a run (here and across processes) for the duration,
        so no run can start on a half-restored worktree; the host-recorded worktree is
        checked on disk before any git runs (``open_git``), never its own ``.git``.
        """
        async with self._claim(conversation_id):
            record = await self._store.get_conversation(conversation_id)
            ws = await self._worktree_here(record)
            await self._checkpoints.rollback(ws, n, conversation_id)  # 404 for unknown n
            _log.info("CHECKPOINT_ROLLBACK", conversation_id=conversation_id, n=n, by=by)
            await self._store.append(
                conversation_id,
                MessageEvent(
                    role="system",
                    text=f"{by} rolled the worktree back to checkpoint {n}",
                ),
            )
            mirrors = self._worktrees.mirrors
            if mirrors is not None and mirrors.project_of_workspace(ws) is not None:
                # A travelling worktree resumes from the remote's newest checkpoint: the
                # restored state becomes it, or a resume elsewhere would undo the rollback.
                cp = await self._checkpoints.create(ws, conversation_id)
                await self._store.append(
                    conversation_id, CheckpointEvent(index=cp.index, ref=cp.ref)
                )

    async def _worktree_here(self, record: ConversationRecord) -> Workspace:
        """The conversation's worktree in this process: the recorded one, or for a project
        with a remote the one any worker makes from the remote's newest checkpoint."""
        info = record.workspace
        if info is None or not info.is_worktree:
            raise ConflictError(f"conversation {record.id} has no worktree, so no checkpoints")
        if project_name(record.task.repository) is not None:
            repo = self._repositories.check(record.task.repository)  # this process's mirror
            return await self._worktrees.resume(repo, record.id, info)
        ws = recorded_workspace(Path(info.path), record.id)
        if ws is None:
            raise ConflictError(f"the worktree of {record.id} no longer exists")
        return ws
