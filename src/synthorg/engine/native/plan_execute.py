"""The plan_execute loop: plan, run each step as a bounded react sub-loop, re-plan on failure."""

from __future__ import annotations

from synthorg.domain import TerminationReason
from synthorg.engine.native.phases import plan_phase, restore_plan, step_phase
from synthorg.engine.native.prompts import ASK_PLAN, PLAN_EXECUTE, replan_prompt, step_prompt
from synthorg.engine.native.runtime import NativeLoop, control_tools
from synthorg.engine.native.tools import ToolSet
from synthorg.engine.native.turn import TurnEngine
from synthorg.engine.protocol import LoopContext
from synthorg.engine.termination import Terminated


class PlanExecuteLoop(NativeLoop):
    """Plan, then one step at a time; a failed or stuck step triggers a re-plan.

    Ends COMPLETED when every step is done (or on ``finish``), ERROR after ``max_replans``
    re-plans, MAX_TURNS at the run's cap, or whatever the sink asks for. A resumed run picks
    the plan and the steps done back up from the log.
    """

    loop_type = "plan_execute"
    prompt = PLAN_EXECUTE

    async def _run(self, engine: TurnEngine, work: ToolSet, context: LoopContext) -> str:
        s = self._deps.settings
        plan_tools = work.with_tools(*control_tools("write_plan"))
        step_tools = work.with_tools(*control_tools("complete_step", "finish"))
        restored = restore_plan(context.prior_events)
        steps, done = restored if restored is not None else ((), 0)
        replans, failure = 0, None
        summaries: list[str] = []
        while True:
            if not steps or failure is not None:
                if failure is not None:
                    replans += 1
                    if replans > s.max_replans:
                        raise Terminated(
                            TerminationReason.ERROR,
                            f"gave up after {s.max_replans} re-plans: {failure}",
                        )
                await engine.say(
                    ASK_PLAN if failure is None else replan_prompt(steps, done, failure)
                )
                steps = await plan_phase(engine, plan_tools, s.planning_attempts)
                done, failure = 0, None
            if done >= len(steps):
                return "\n".join(summaries) or f"completed all {len(steps)} plan steps"
            await engine.say(step_prompt(steps, done))
            step = await step_phase(engine, step_tools, s.step_max_turns)
            if step.done:
                done += 1
                summaries.append(f"{done}. {step.summary}")
            else:
                failure = step.summary
