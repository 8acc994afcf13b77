"""Landing a completed run: the worktree's change against its base, and the commit gate."""

from __future__ import annotations

from dataclasses import dataclass

from synthorg.domain import ConversationRecord, ExecutionResult
from synthorg.engine import LandingRefused
from synthorg.hostwork import HostWorkExceeded
from synthorg.logging import get_logger
from synthorg.workspace import views
from synthorg.workspace.errors import GateRefusedError
from synthorg.workspace.gate import CommitGate
from synthorg.workspace.git import GitError
from synthorg.workspace.hostlimits import HostLimits
from synthorg.workspace.models import GateSummary, Workspace
from synthorg.workspace.snapshot import Snapshot

_log = get_logger("synthorg.service")


@dataclass(slots=True)
class LandingScan:
    """One run's NO_OP check's scan of its worktree, handed to the landing that follows.

    Both come after the run's sandbox is gone, so nothing of the run can write the worktree
    in between: scanning it again (a ``git add -A`` and a ``write-tree``) finds the same.
    """

    snapshot: Snapshot | None = None
    """The full scan by content, once the check has taken it."""


async def workspace_changed(
    workspace: Workspace, scan: LandingScan | None = None, limits: HostLimits | None = None
) -> bool | None:
    """Whether the worktree's content differs from the conversation's base (the NO_OP rule);
    None without git, where there is no base to compare with. ``scan`` keeps the scan;
    ``limits`` are the gate's (what it would refuse is never hashed here either)."""
    if not workspace.is_git:
        return None
    try:
        # Right after the run's sandbox (and its overlay) is gone: nothing else has written
        # the worktree since, so the overlay's record of the run's changes may stand in for a
        # scan of every file (workspace/snapshot.py, SnapshotIndex._from_overlay).
        snapshot, found = await views.scan_changes(workspace, limits, overlay=True)
    except (GateRefusedError, HostWorkExceeded):
        return True  # tampered, too many files, over budget: not NO_OP; landing says why
    if scan is not None:
        scan.snapshot = snapshot
    return bool(found) or bool(snapshot.unhashed)  # files too big to hash are changes too


async def land(
    gate: CommitGate,
    record: ConversationRecord,
    workspace: Workspace,
    result: ExecutionResult,
    *,
    scan: LandingScan | None = None,
) -> ExecutionResult:
    """Commit the run's changes through the gate; LandingRefused when it refuses them."""
    summary = GateSummary(
        task_id=record.task.id,
        title=record.task.title,
        conversation_id=record.id,
        loop_type=result.loop_type,
        turns=len(result.turns),
        cost_usd=result.usage.cost_usd,
    )
    try:
        outcome = await gate.land(
            workspace, summary, scanned=scan.snapshot if scan is not None else None
        )
    except (GateRefusedError, HostWorkExceeded) as exc:  # secrets, oversize, over budget, ...
        raise LandingRefused(str(exc), code=exc.code) from exc
    except GitError as exc:  # the worktree's content broke host git (e.g. its .gitmodules)
        raise LandingRefused(
            f"the commit gate could not read the worktree, nothing was committed: {exc}. "
            "Inspect the worktree (a nested repository or .gitmodules?), then delete the "
            "conversation"
        ) from exc
    _log.info(
        "COMMIT_GATE",
        conversation_id=record.id,
        committed=outcome.committed,
        sha=outcome.sha,
        reason=outcome.reason,
    )
    return result.model_copy(
        update={"commit_sha": outcome.sha, "branch": outcome.branch or result.branch}
    )
