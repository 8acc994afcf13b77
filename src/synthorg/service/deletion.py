"""Deleting a conversation (a root: its whole delegation tree): what refuses it, what goes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from synthorg.domain import ConversationRecord
from synthorg.errors import ConflictError, NotFoundError
from synthorg.logging import get_logger
from synthorg.service.exclusive import Claim
from synthorg.service.tree import members, run_tree
from synthorg.store.protocol import Store
from synthorg.workspace.remote import project_name
from synthorg.workspace.worktrees import WorktreeManager

_log = get_logger("synthorg.service")


def refuse_active(record: ConversationRecord, *, active: bool) -> None:
    """The one delete-while-active rule: ConflictError while a run of ``record`` is in
    progress, here (``active``) or as its record says (another process may hold it)."""
    if active or record.status.is_active:
        raise ConflictError(
            f"conversation {record.id} is {record.status.value}: cancel or interrupt "
            "it before deleting"
        )


class Deletion:
    """``LocalRunService.delete``'s work, under the service's claim."""

    def __init__(
        self,
        *,
        store: Store,
        worktrees: WorktreeManager,
        is_active: Callable[[str], bool],
        claim: Claim,
    ) -> None:
        self._store = store
        self._worktrees = worktrees
        self._is_active = is_active
        self._claim = claim

    async def __call__(self, conversation_id: str, *, delete_branch: bool = False) -> None:
        """Remove the conversation, its events and its worktree, and with a root its whole
        delegation tree; refused while any of them is active. The ledger keeps their rows.

        Every member is claimed like a run (here and across processes) before its status is
        read, so no run can start in a conversation being deleted."""
        record = await self._store.get_conversation(conversation_id)
        refuse_active(record, active=self._is_active(conversation_id))
        await self._refuse_tree_member(record)
        root = record.root_id is None or record.root_id == record.id
        tree = await run_tree(self._store, record.id)
        doomed = members(tree) if root else [tree]
        async with contextlib.AsyncExitStack() as claims:
            for member in doomed:
                await claims.enter_async_context(self._claim(member.id))
                # Read under the claim: no run can have started since.
                refuse_active(await self._store.get_conversation(member.id), active=False)
            for member in doomed:
                workspace = await self._worktrees.get(member.id)
                if workspace is not None:
                    await self._worktrees.remove(workspace, delete_branch=delete_branch)
                await self._forget_remotely(member.id, delete_branch=delete_branch)
            await self._store.delete_conversation(conversation_id)

    async def _forget_remotely(self, conversation_id: str, *, delete_branch: bool) -> None:
        """A project's remote loses a deleted conversation's refs (``Mirrors.forget``), before
        its record goes: a remote that cannot be reached fails the delete, which is retried."""
        record = await self._store.get_conversation(conversation_id)
        project = project_name(record.task.repository)
        mirrors = self._worktrees.mirrors
        if project is None:
            return
        if mirrors is None or project not in mirrors.projects:
            _log.warning("REMOTE_REFS_KEPT", conversation_id=conversation_id, project=project)
            return
        await mirrors.forget(project, conversation_id, delete_branch=delete_branch)

    async def _refuse_tree_member(self, record: ConversationRecord) -> None:
        """A delegated child that ran goes only with its root: its ledger rows stay, but the
        tree's one budget counts them through the child's row (its ``root_id``), so the root
        could spend them again. One that never ran (a delegation undone at spawn) has none."""
        if record.root_id is None or record.root_id == record.id:
            return
        if not await self._store.executions_of(record.id):
            return
        try:
            await self._store.get_conversation(record.root_id)
        except NotFoundError:
            return  # the tree is gone: nothing left to spend its budget
        raise ConflictError(
            f"conversation {record.id} was delegated in the tree of {record.root_id}; its spend "
            "counts against that tree's budget, so it is deleted only once its root is"
        )
