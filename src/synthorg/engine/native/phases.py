"""Phases the loops compose: planning, one plan step, and reading a plan back from the log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from synthorg.domain import ActionEvent, ObservationEvent, StoredEvent, TerminationReason
from synthorg.engine.native.prompts import NUDGE_TOOL
from synthorg.engine.native.tools import PlanWritten, StepCompleted, ToolSet
from synthorg.engine.native.turn import Acted, Replied, TurnEngine, TurnOutcome
from synthorg.engine.termination import Terminated


@dataclass(frozen=True)
class StepEnd:
    """How a plan step ended when the run goes on."""

    done: bool
    summary: str


def written_plan(outcome: TurnOutcome) -> tuple[str, ...] | None:
    """The last plan written in this turn, if any."""
    if not isinstance(outcome, Acted):
        return None
    plans = [s.steps for s in outcome.signals if isinstance(s, PlanWritten)]
    return plans[-1] if plans else None


async def nudge(engine: TurnEngine, outcome: TurnOutcome, tool: str) -> None:
    """The model answered in prose where a tool call was due: ask for one."""
    if isinstance(outcome, Replied):
        await engine.say(NUDGE_TOOL.format(tool=tool))


async def plan_phase(engine: TurnEngine, tools: ToolSet, turns: int) -> tuple[str, ...]:
    """Turns until the model writes a plan (it may look around first), at most ``turns``."""
    for _ in range(turns):
        outcome = await engine.turn(tools)
        plan = written_plan(outcome)
        if plan is not None:
            return plan
        await nudge(engine, outcome, "write_plan")
    raise Terminated(TerminationReason.ERROR, f"no plan was written within {turns} turns")


async def step_phase(engine: TurnEngine, tools: ToolSet, turns: int) -> StepEnd:
    """A bounded react sub-loop on the current step, until complete_step."""
    for _ in range(turns):
        outcome = await engine.turn(tools)
        if isinstance(outcome, Acted):
            closed = [s for s in outcome.signals if isinstance(s, StepCompleted)]
            if closed:
                return StepEnd(closed[-1].done, closed[-1].summary)
            if outcome.repeated is not None:
                engine.forget_repetition()
                return StepEnd(False, f"stuck: repeated {outcome.repeated}")
        await nudge(engine, outcome, "complete_step")
    return StepEnd(False, f"the step was not completed within {turns} turns")


def restore_plan(events: Sequence[StoredEvent]) -> tuple[tuple[str, ...], int] | None:
    """The latest plan in an earlier run's log and how many of its steps were done."""
    actions: dict[str, ActionEvent] = {}
    plan: tuple[str, ...] | None = None
    done = 0
    for stored in events:
        event = stored.event
        if isinstance(event, ActionEvent):
            actions[event.action_id] = event
        elif isinstance(event, ObservationEvent) and not event.is_error:
            action = actions.get(event.action_id)
            if action is None:
                continue
            if action.tool_name == "write_plan":
                plan, done = tuple(str(s) for s in action.arguments.get("steps", ())), 0
            elif action.tool_name == "complete_step" and action.arguments.get("outcome") == "done":
                done += 1
    return None if not plan else (plan, min(done, len(plan)))
