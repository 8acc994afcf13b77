"""Planning tools: write_plan (ordered steps) and complete_step (close the current step)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from synthorg.engine.native.tools.base import (
    ModelTool,
    PlanWritten,
    StepCompleted,
    Tool,
    ToolResult,
)

MAX_PLAN_STEPS = 20

Step = Annotated[str, StringConstraints(min_length=1, max_length=500, strip_whitespace=True)]


class WritePlanArgs(BaseModel):
    """Arguments of write_plan."""

    model_config = ConfigDict(extra="forbid")

    steps: list[Step] = Field(
        min_length=1, max_length=MAX_PLAN_STEPS, description="Ordered, concrete steps."
    )


class CompleteStepArgs(BaseModel):
    """Arguments of complete_step."""

    model_config = ConfigDict(extra="forbid")

    outcome: Literal["done", "failed"] = Field(description="done, or failed if it cannot be done.")
    summary: str = Field(description="What was done, or why it failed.")


def render_plan(steps: tuple[str, ...], done: int = 0) -> str:
    """The plan as a numbered checklist."""
    return "\n".join(
        f"{i}. [{'x' if i <= done else ' '}] {step}" for i, step in enumerate(steps, start=1)
    )


def write_plan_tool() -> Tool:
    """Records the plan the loop then follows."""

    async def run(args: WritePlanArgs) -> ToolResult:
        steps = tuple(args.steps)
        return ToolResult(
            content="Plan recorded:\n" + render_plan(steps), signal=PlanWritten(steps)
        )

    return ModelTool(
        name="write_plan",
        description=(
            f"Write (or rewrite) your plan: 1 to {MAX_PLAN_STEPS} ordered, concrete steps that "
            "together complete the task. A rewrite replaces the remaining steps."
        ),
        args_model=WritePlanArgs,
        execute=run,
        summarize=lambda a: f"plan of {len(a.steps)} steps",
    )


def complete_step_tool() -> Tool:
    """Closes the current plan step as done or failed."""

    async def run(args: CompleteStepArgs) -> ToolResult:
        done = args.outcome == "done"
        return ToolResult(
            content=f"Step marked {args.outcome}.", signal=StepCompleted(done, args.summary)
        )

    return ModelTool(
        name="complete_step",
        description="Close the current plan step: outcome 'done' or 'failed', with a summary.",
        args_model=CompleteStepArgs,
        execute=run,
        summarize=lambda a: f"step {a.outcome}: {a.summary[:120]}",
    )
