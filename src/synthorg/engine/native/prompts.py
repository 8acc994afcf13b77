"""The instructions the native loops give the model."""

from __future__ import annotations

from synthorg.engine.native.tools.plan import render_plan

_BASE = """You are a software engineering agent working in a git repository at {workspace}.
Work only through the tools. Make the smallest correct change, verify it (run the tests), and
keep the repository clean of scratch files. Do not commit: the platform commits your changes."""

REACT = (
    _BASE
    + """
When the task is done and verified, call `finish` with a short summary."""
)

PLAN_EXECUTE = (
    _BASE
    + """
First write a plan with `write_plan`. You will then be given one step at a time: do it, then
call `complete_step` (outcome "done", or "failed" with the reason). Call `finish` only when the
whole task is done."""
)

HYBRID = (
    _BASE
    + """
First write a plan with `write_plan`, then work through it. Revise it with `write_plan`
whenever it turns out wrong. When the task is done and verified, call `finish`."""
)

ASK_PLAN = "Write your plan for the task now with `write_plan`."

RESUMED = (
    "The run was interrupted and has been resumed. The workspace keeps every change made so "
    "far. Continue the task from where you left off."
)

NUDGE_TOOL = "Reply with a tool call: continue the work, or call `{tool}`."


def step_prompt(steps: tuple[str, ...], index: int) -> str:
    """Hand the model step ``index`` (0-based) of the plan."""
    return (
        f"Plan:\n{render_plan(steps, index)}\n\nNow do step {index + 1} of {len(steps)}: "
        f"{steps[index]}\nCall `complete_step` when it is done (or failed)."
    )


def replan_prompt(steps: tuple[str, ...], done: int, why: str) -> str:
    """Ask for a new plan after a failed step."""
    return (
        f"Step {done + 1} did not succeed: {why}\nPlan so far:\n{render_plan(steps, done)}\n"
        "Write a revised plan for the remaining work with `write_plan`."
    )


def review_prompt(steps: tuple[str, ...], turns: int) -> str:
    """Periodic plan review of the hybrid loop."""
    return (
        f"Checkpoint after {turns} turns. Your plan:\n{render_plan(steps)}\n"
        "If it no longer fits what you found, revise it with `write_plan`; otherwise continue."
    )


def stuck_prompt(action: str) -> str:
    """Tell the model it repeats itself and ask for a revised plan."""
    return (
        f"You have repeated the same action ({action}) several times without progress. "
        "Step back, rethink, and write a revised plan with `write_plan`."
    )
