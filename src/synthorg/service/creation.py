"""Conversation creation: choose the loop, model and provider, check the repository, record it.

A conversation is created all-or-nothing: its worktree and branch exist only if its record does.
A well-formed choice this server does not offer (a model no provider serves, a loop whose
runtime is not installed, a repository that does not exist) is NotFoundError, as an API that
names a missing object in a request body answers; a malformed one is the caller's UsageError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from synthorg.domain import AgentIdentity, ConversationRecord, Task, new_id
from synthorg.domain.ids import is_valid_id
from synthorg.engine import EngineConfig, LoopRegistry, select_loop_type
from synthorg.errors import ConfigError, NotFoundError, UsageError
from synthorg.gateway.service import Gateway
from synthorg.logging import get_logger
from synthorg.service.config import RunDefaults
from synthorg.service.options import RunOptions
from synthorg.service.provisioning import LoopProvisioner
from synthorg.service.repositories import RepositoryPolicy
from synthorg.store.protocol import ConversationStore
from synthorg.workspace.worktrees import WorktreeManager

_log = get_logger("synthorg.service")


class NotOffered(NotFoundError):
    """A well-formed choice this server does not offer (answered 404 by the server)."""


@dataclass(frozen=True, kw_only=True)
class ConversationCreator:
    """Creates conversations (not started) for the run service."""

    store: ConversationStore
    gateway: Gateway
    worktrees: WorktreeManager
    registry: LoopRegistry
    provision: LoopProvisioner
    engine: EngineConfig
    defaults: RunDefaults
    repositories: RepositoryPolicy
    clock: Callable[[], datetime]

    async def create(
        self,
        task: Task,
        options: RunOptions,
        *,
        conversation_id: str | None = None,
        repositories: RepositoryPolicy | None = None,
    ) -> ConversationRecord:
        """Persist a new conversation with its worktree (not started).

        ``conversation_id`` is chosen by the caller only when something else is keyed by it
        first (a Temporal workflow id); it must be a valid id and not taken. ``repositories``:
        the caller's rule when it is not this process's (the local operator's).
        """
        loop_type = select_loop_type(task, self.engine, forced=options.loop)
        if loop_type not in self.registry.buildable:
            raise UsageError(
                f"loop {loop_type!r} cannot be built here; buildable: "
                f"{sorted(self.registry.buildable)}"
            )
        try:
            self.provision.check(loop_type)
        except ConfigError as exc:  # a loop this host lacks the runtime of: not offered here
            raise NotOffered(str(exc)) from exc
        model = options.model or self.defaults.model
        try:
            provider = options.provider or self.gateway.config.provider_for(model)
        except NotFoundError as exc:  # no provider serves it: not offered here
            raise NotOffered(str(exc)) from exc
        repo = (repositories or self.repositories).check(task.repository)
        if not repo.is_dir():
            raise NotOffered(f"repository {repo} is not a directory")
        if conversation_id is None:
            conversation_id = new_id("conv")
        elif not is_valid_id(conversation_id):
            raise UsageError(f"invalid conversation id {conversation_id!r}")
        workspace = await self.worktrees.create(
            repo, conversation_id, base_ref=options.base_ref, enabled=options.worktree
        )
        now = self.clock()
        record = ConversationRecord(
            id=conversation_id,
            task=task,
            agent=AgentIdentity(id=f"agent-{loop_type}"),
            loop_type=loop_type,
            model=model,
            provider=provider,
            created_at=now,
            updated_at=now,
            workspace=workspace.info(),
            max_turns=options.max_turns or self.engine.max_turns,
            budget_usd=options.budget_usd
            if options.budget_usd is not None
            else self.defaults.budget_usd,
            confirmation_policy=options.confirmation_policy,
        )
        try:
            await self.store.create_conversation(record)
        except BaseException:
            # All-or-nothing: no worktree or branch outlives a conversation never recorded.
            await asyncio.shield(self.worktrees.remove(workspace, delete_branch=True))
            raise
        _log.info(
            "CONVERSATION_CREATED",
            conversation_id=conversation_id,
            loop_type=loop_type,
            model=model,
            workspace=str(workspace.path),
            note=workspace.note,
        )
        return record
