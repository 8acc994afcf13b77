"""The runs active in this process: one per conversation, pruned when it ends."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from synthorg.domain import ExecutionResult, TerminationReason
from synthorg.engine import RunControl
from synthorg.errors import ConflictError
from synthorg.service.repositories import RepositoryPolicy

ENDED_KEPT = 256
"""Ended runs whose result ``wait`` still returns."""


@dataclass
class ActiveRun:
    """One run in progress: its control, why it was asked to stop, its task."""

    control: RunControl = field(default_factory=RunControl)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    stop_requested: TerminationReason | None = None
    runner_started: bool = False
    closing: bool = False
    """The loop has returned: teardown and ``finish_run`` follow, and a stop no longer cancels."""
    task: asyncio.Task[ExecutionResult] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    repositories: RepositoryPolicy | None = None
    """The rule of whoever started it when not this process's (the local operator's)."""
    fence: str | None = None
    """The owner id its writes are fenced to (store.fence), when this process fences."""


class ActiveRuns:
    """Active runs by conversation, and the last ended runs' tasks (bounded) for ``wait``."""

    def __init__(self) -> None:
        self._active: dict[str, ActiveRun] = {}
        self._ended: OrderedDict[str, asyncio.Task[ExecutionResult]] = OrderedDict()

    def is_active(self, conversation_id: str) -> bool:
        """Whether a run of this conversation is in progress here."""
        active = self._active.get(conversation_id)
        return active is not None and not active.done.is_set()

    def claim(self, conversation_id: str) -> ActiveRun:
        """Register a new run (synchronously: concurrent starts cannot both pass)."""
        if self.is_active(conversation_id):
            raise ConflictError(f"conversation {conversation_id} already has an active run")
        active = ActiveRun()
        self._active[conversation_id] = active
        return active

    def require(self, conversation_id: str) -> ActiveRun:
        """The active run, or ConflictError."""
        active = self._active.get(conversation_id)
        if active is None or active.done.is_set():
            raise ConflictError(f"conversation {conversation_id} has no active run")
        return active

    def task_of(self, conversation_id: str) -> asyncio.Task[ExecutionResult] | None:
        """The task of the active or a recently ended run."""
        active = self._active.get(conversation_id)
        return active.task if active is not None else self._ended.get(conversation_id)

    def running(self) -> list[ActiveRun]:
        """Runs whose task is still going."""
        return [a for a in self._active.values() if a.task is not None and not a.done.is_set()]

    def end(self, conversation_id: str, active: ActiveRun) -> None:
        """The run ended: off the active map, its task kept among the last ended runs."""
        active.done.set()
        if self._active.get(conversation_id) is active:
            del self._active[conversation_id]
        if active.task is not None:
            self._ended[conversation_id] = active.task
            self._ended.move_to_end(conversation_id)
            while len(self._ended) > ENDED_KEPT:
                self._ended.popitem(last=False)
