"""The NO_OP rule: a task that expected artifacts, completed, and changed nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from synthorg.domain import Task, TerminationReason, TurnRecord

CONTROL_TOOLS: frozenset[str] = frozenset({"finish", "think", "write_plan", "complete_step"})
"""Tools that steer the loop itself; calling only these changes nothing in the workspace."""

WorkspaceChanged = Callable[[], Awaitable[bool | None]]
"""Whether the worktree's content differs from the conversation's base (a read-only view);
None when the workspace has no base to compare with (not git)."""

NO_OP_MESSAGE = (
    "the task expected changes but the worktree is unchanged since the run's base: "
    "nothing to commit; say what to change and resume, or create the task without "
    "artifacts_expected"
)


def work_tool_calls(turns: Sequence[TurnRecord]) -> int:
    """Tool calls that act on the world (not finish/think/plan bookkeeping)."""
    return sum(1 for turn in turns for name in turn.tool_names if name not in CONTROL_TOOLS)


def is_no_op(
    task: Task,
    reason: TerminationReason,
    *,
    changed: bool | None,
    turns: Sequence[TurnRecord],
    resumed: bool,
) -> bool:
    """A completed run of a task expecting artifacts that left the worktree unchanged.

    ``changed`` compares the worktree's content with the conversation's base, so it holds
    for resumed runs too. Without a view of the content (``None``: not a git workspace) a
    fresh run that made no work tool call is the best evidence there is; a resumed one
    then gets the benefit of the doubt.
    """
    if reason is not TerminationReason.COMPLETED or not task.artifacts_expected:
        return False
    if changed is not None:
        return not changed
    return work_tool_calls(turns) == 0 and not resumed
