"""The NO_OP predicate shared by every loop."""

from __future__ import annotations

from synthorg.domain import Task

CONTROL_TOOLS: frozenset[str] = frozenset({"finish", "think", "write_plan", "complete_step"})
"""Tools that steer the loop itself; calling only these changes nothing in the workspace."""


def is_no_op(task: Task, *, tool_calls: int, resumed: bool) -> bool:
    """A task expecting artifacts that made no (work) tool call, on a fresh run, did nothing.

    It terminates NO_OP (routed to FAILED downstream), never a silent success. A resumed run
    is exempt: its work may have happened before the restart.
    """
    return task.artifacts_expected and tool_calls == 0 and not resumed
