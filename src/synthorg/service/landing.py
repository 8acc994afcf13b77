"""Landing a completed run: the worktree's change against its base, and the commit gate."""

from __future__ import annotations

from synthorg.domain import ConversationRecord, ExecutionResult
from synthorg.engine import LandingRefused
from synthorg.logging import get_logger
from synthorg.workspace import views
from synthorg.workspace.errors import GateRefusedError
from synthorg.workspace.gate import CommitGate
from synthorg.workspace.git import GitError
from synthorg.workspace.models import GateSummary, Workspace

_log = get_logger("synthorg.service")


async def workspace_changed(workspace: Workspace) -> bool | None:
    """Whether the worktree's content differs from the conversation's base (the NO_OP rule);
    None without git, where there is no base to compare with."""
    if not workspace.is_git:
        return None
    try:
        return bool(await views.changes(workspace))
    except GateRefusedError:
        return True  # a tampered worktree: not NO_OP; landing refuses it, saying why


async def land(
    gate: CommitGate, record: ConversationRecord, workspace: Workspace, result: ExecutionResult
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
        outcome = await gate.land(workspace, summary)
    except GateRefusedError as exc:  # secrets, core dumps, oversize files, a tampered worktree
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
