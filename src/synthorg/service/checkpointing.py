"""A native run's checkpoints before (and after) its mutating actions, and its early scan.

The first checkpoint needs a whole scan of the tree (a second at 100,000 files). It starts
as soon as the sandbox is up (``early_scan``), so it runs while the model writes its first
answer. When the first mutating action comes while that scan still runs and the run's
overlay has changed nothing, the checkpoint is the layer under the overlay, which nothing
the run does can change: the action starts at once and the checkpoint is committed beside
it from that scan, which reads that layer (``CheckpointUnderWay``), logged before the
action's observation. Every checkpoint so written is finished before the
sandbox (and its overlay) goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from synthorg.domain import CheckpointEvent
from synthorg.engine.native.turn import CheckpointHook, CheckpointUnderWay
from synthorg.logging import get_logger
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.models import Workspace

log = get_logger(__name__)

Layer = tuple[str, Path]
"""The layer under a live overlay: the overlay's token and where that layer is mounted."""


@dataclass
class EarlyScan:
    """The first checkpoint's whole scan, under way since the sandbox came up."""

    scan: asyncio.Task[None]
    beside: set[asyncio.Task[CheckpointEvent]] = field(default_factory=set)
    """Checkpoints being written beside an action that already runs."""


@asynccontextmanager
async def early_scan(
    checkpoints: CheckpointStore, workspace: Workspace
) -> AsyncIterator[EarlyScan | None]:
    """Start the first checkpoint's scan now (the sandbox is up, nothing has run). On the
    way out, every checkpoint still being written beside an action is finished (it reads
    the layer under the overlay), then the scan is stopped: both before the overlay goes."""
    if not workspace.is_git:
        yield None
        return
    scan = asyncio.create_task(checkpoints.prepare(workspace), name="first-checkpoint-scan")
    early = EarlyScan(scan)
    try:
        yield early
    finally:
        for task in list(early.beside):
            await _settled(task, "first_checkpoint_failed")
        scan.cancel()
        await _settled(scan)


def checkpoint_hook(
    checkpoints: CheckpointStore, workspace: Workspace, early: EarlyScan | None = None
) -> CheckpointHook | None:
    """The checkpoint taken before each mutating action (``early``: the first one's scan,
    under way; waited for, or written beside the action as the module says)."""
    if not workspace.is_git:
        return None
    cid = workspace.conversation_id

    async def below(layer: Layer, action_id: str) -> CheckpointEvent:
        assert early is not None
        await _settled(early.scan)
        checkpoint = await checkpoints.create_below(workspace, layer, cid)
        return CheckpointEvent(index=checkpoint.index, ref=checkpoint.ref, action_id=action_id)

    async def snapshot(action_id: str) -> CheckpointEvent | CheckpointUnderWay | None:
        if early is not None and not early.scan.done():
            layer = checkpoints.unchanged_below(workspace)
            if layer is not None:
                task = asyncio.create_task(below(layer, action_id), name="first-checkpoint")
                early.beside.add(task)
                task.add_done_callback(early.beside.discard)
                return CheckpointUnderWay(task)
        if early is not None:
            await _settled(early.scan)
        checkpoint = await checkpoints.create(workspace, cid)
        return CheckpointEvent(index=checkpoint.index, ref=checkpoint.ref, action_id=action_id)

    return snapshot


def settle_hook(checkpoints: CheckpointStore, workspace: Workspace) -> CheckpointHook | None:
    """A checkpoint after each mutating action too, for a worktree published to a remote:
    otherwise a worker dying after an action logged as done, before the next checkpoint,
    leaves its effect on the dead machine (a local worktree keeps it: no need)."""
    publisher = checkpoints.publisher
    if publisher is None or publisher.project_of_workspace(workspace) is None:
        return None
    return checkpoint_hook(checkpoints, workspace)


async def _settled(
    task: asyncio.Task[None] | asyncio.Task[CheckpointEvent],
    failed: str = "first_checkpoint_scan_failed",
) -> None:
    """Wait for the task, logging its failure as ``failed``. The scan's failure only means
    the checkpoint scans for itself (and meets the same error, if it lasts, where the run
    can report it); a checkpoint written beside an action that the sandbox's end waits for
    is one whose turn did not (a stop that came twice): its failure was the turn's to
    report, and the turn is gone."""
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.cancelled():
            raise  # the caller was cancelled, not the task
    except Exception as exc:
        log.info(failed, error=str(exc))
