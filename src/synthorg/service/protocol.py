"""The run service boundary: what the CLI, the server and workers ask of SynthOrg."""

from __future__ import annotations

from typing import Protocol

from synthorg.domain import ConversationRecord, ExecutionResult, Task
from synthorg.engine.control import Decision
from synthorg.service.options import RunOptions


class RunService(Protocol):
    """Creates conversations and drives their runs; one active run per conversation."""

    async def create(self, task: Task, options: RunOptions) -> ConversationRecord:
        """Persist a new conversation and its workspace (not started)."""
        ...

    async def start(self, conversation_id: str, *, message: str | None = None) -> None:
        """Start (or continue) a run in the background; ConflictError if one is active."""
        ...

    async def run(self, conversation_id: str, *, message: str | None = None) -> ExecutionResult:
        """Start a run and wait for its end (commit gate included)."""
        ...

    async def wait(self, conversation_id: str) -> ExecutionResult | None:
        """Wait for the active run to end; None when none is active."""
        ...

    def is_active(self, conversation_id: str) -> bool:
        """Whether a run of this conversation is in progress in this process."""
        ...

    async def steer(self, conversation_id: str, text: str) -> None:
        """A message for the next turn of the active run; ConflictError if none."""
        ...

    async def pause(self, conversation_id: str, *, by: str) -> None:
        """Stop after the in-flight model call; resumable."""
        ...

    async def interrupt(self, conversation_id: str, *, by: str) -> None:
        """Stop immediately; resumable."""
        ...

    async def cancel(self, conversation_id: str, *, by: str) -> None:
        """Stop immediately; the conversation ends CANCELLED."""
        ...

    async def decide(self, conversation_id: str, decision: Decision) -> None:
        """Deliver a confirmation decision; ConflictError for ids not pending."""
        ...

    async def rollback(self, conversation_id: str, n: int, *, by: str) -> None:
        """Restore the worktree to checkpoint ``n`` (recorded as done by ``by``);
        ConflictError while a run is active, NotFoundError for an unknown checkpoint."""
        ...

    async def delete(self, conversation_id: str, *, delete_branch: bool = False) -> None:
        """Remove the conversation, its events and its worktree (a root: its whole tree);
        refused while active. The gateway's ledger keeps their rows."""
        ...

    async def shutdown(self) -> None:
        """Stop every active run with SHUTDOWN (resumable) and release resources."""
        ...
