"""The delegate tool: the model asks for sub-tasks; the host runs, budgets and merges them."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from synthorg.domain import RiskLevel
from synthorg.engine.native.tools.base import ModelTool, Tool, ToolResult

_ARGS = ConfigDict(extra="forbid")


class SubTask(BaseModel):
    """One sub-task the model delegates."""

    model_config = _ARGS

    prompt: str = Field(min_length=1, max_length=20_000, description="What the sub-agent does.")
    loop: str | None = Field(
        default=None, max_length=40, description="Loop type for it (react, plan_execute, hybrid)."
    )
    model: str | None = Field(default=None, max_length=200, description="Model id; None = yours.")
    budget_share: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Share of your remaining budget it may spend; None = an equal split.",
    )
    paths: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="Paths it expects to touch (a hint; the host merges whatever it changes).",
    )


class DelegateArgs(BaseModel):
    """Arguments of the delegate tool."""

    model_config = _ARGS

    tasks: list[SubTask] = Field(
        min_length=1, max_length=32, description="Sub-tasks, run in parallel, merged in order."
    )


class Delegator(Protocol):
    """Runs one run's sub-tasks as child conversations and merges their work back."""

    async def delegate(self, tasks: Sequence[SubTask]) -> ToolResult:
        """Run the children, merge their commits; the observation says what happened."""
        ...

    def spent(self) -> Decimal:
        """What the children of this run's delegate calls spent, from the ledger."""
        ...


def delegate_tool(delegator: Delegator) -> Tool:
    """Hands sub-tasks to child agents, each on its own worktree, merged back by the host."""

    def summary(args: DelegateArgs) -> str:
        return f"delegate {len(args.tasks)} sub-task(s): " + "; ".join(
            t.prompt.splitlines()[0][:60] for t in args.tasks
        )

    return ModelTool(
        name="delegate",
        description=(
            "Delegate sub-tasks to sub-agents that work in parallel, each on its own copy of "
            "the workspace as it is now. When they finish, the host merges their changes into "
            "your workspace in the order given; a conflict is reported (naming the files) and "
            "nothing is merged. Each child's budget is carved out of yours. Repeating the "
            "same call after an interruption continues the same children."
        ),
        args_model=DelegateArgs,
        execute=lambda args: delegator.delegate(args.tasks),
        # It spends money and changes the workspace: a checkpoint is taken before it runs,
        # and that checkpoint is the children's starting point.
        risk_of=lambda _: RiskLevel.MEDIUM,
        mutates_if=lambda _: True,
        summarize=summary,
    )
