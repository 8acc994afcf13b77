"""Phases the loops compose: planning, one plan step, and reading a plan back from the log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from synthorg.domain import ActionEvent, ObservationEvent, StoredEvent, TerminationReason
from synthorg.engine.native.prompts import NUDGE_TOOL
from synthorg.engine.native.tools import PlanWritten, StepCompleted, ToolSet
from synthorg.engine.native.turn import TurnEngine, TurnOutcome


@dataclass(frozen=True)
class Ending:
    """The run must end this way."""

    reason: TerminationReason
    message: str = ""
    error: str | None = None


@dataclass(frozen=True)
class StepEnd:
    """How a plan step ended when the run goes on."""

    done: bool
    summary: str


def ending_of(outcome: TurnOutcome) -> Ending | None:
    """A stop requested during the turn, or a finish; None when the run goes on."""
    if outcome.stop is not None:
        return Ending(outcome.stop, error=outcome.error)
    if outcome.finished is not None:
        return Ending(TerminationReason.COMPLETED, message=outcome.finished)
    return None


def written_plan(outcome: TurnOutcome) -> tuple[str, ...] | None:
    """The last plan written in this turn, if any."""
    plans = [s.steps for s in outcome.signals if isinstance(s, PlanWritten)]
    return plans[-1] if plans else None


async def nudge(engine: TurnEngine, tool: str) -> Ending | None:
    """The model answered in prose where a tool call was due: ask for one."""
    stop = await engine.say(NUDGE_TOOL.format(tool=tool))
    return Ending(stop) if stop is not None else None


async def plan_phase(engine: TurnEngine, tools: ToolSet, turns: int) -> tuple[str, ...] | Ending:
    """Turns until the model writes a plan (it may look around first), at most ``turns``."""
    for _ in range(turns):
        outcome = await engine.turn(tools)
        end = ending_of(outcome)
        if end is not None:
            return end
        plan = written_plan(outcome)
        if plan is not None:
            return plan
        if outcome.reply_text is not None and (end := await nudge(engine, "write_plan")):
            return end
    return Ending(TerminationReason.ERROR, error=f"no plan was written within {turns} turns")


async def step_phase(engine: TurnEngine, tools: ToolSet, turns: int) -> StepEnd | Ending:
    """A bounded react sub-loop on the current step, until complete_step."""
    for _ in range(turns):
        outcome = await engine.turn(tools)
        end = ending_of(outcome)
        if end is not None:
            return end
        closed = [s for s in outcome.signals if isinstance(s, StepCompleted)]
        if closed:
            return StepEnd(closed[-1].done, closed[-1].summary)
        if outcome.repeated is not None:
            engine.forget_repetition()
            return StepEnd(False, f"stuck: repeated {outcome.repeated}")
        if outcome.reply_text is not None and (end := await nudge(engine, "complete_step")):
            return end
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
