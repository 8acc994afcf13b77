"""What a run that takes a conversation over does to the owner it supersedes.

The previous execution was killed in the ledger by the claim itself (store.reconcile: its
bearer is then refused by any gateway and the MCP server). On this host the old owner's
sandboxes in the conversation's worktree are stopped here: a frozen owner cannot stop them
itself, and they would go on writing the worktree the new run works in and lands. What a dead
owner's sandbox wrote and never put back (its quota image) is settled onto the worktree then
too, so the new run and its gate judge the real work, also when the resumed run starts no
sandbox at all (the model had already finished).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from synthorg.domain import ConversationRecord
from synthorg.logging import get_logger
from synthorg.sandbox.superseded import stop_sandboxes
from synthorg.store.protocol import RunOwner

_log = get_logger("synthorg.service")


async def supersede(
    record: ConversationRecord,
    previous: RunOwner | None,
    *,
    settle: Callable[[Path], int] | None = None,
) -> None:
    """Stop every other process's sandbox of this conversation on this host and ``settle``
    what dead owners' sandboxes left (a live zombie's quota stays: it holds its lock).
    ``previous`` (the owner read before the claim, None when a sweep released it first) only
    names who was superseded in the log: a sandbox in this worktree is a superseded one."""
    if record.workspace is None:
        return
    worktree = Path(record.workspace.path)
    stopped = await asyncio.to_thread(stop_sandboxes, worktree)
    settled = await asyncio.to_thread(settle, worktree) if settle is not None else 0
    if stopped or settled:
        _log.warning(
            "SUPERSEDED_SANDBOXES_STOPPED",
            conversation_id=record.id,
            owner=previous.describe() if previous is not None else None,
            sandboxes=stopped,
            quotas_settled=settled,
        )
