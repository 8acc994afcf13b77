"""The hybrid loop: plan first, act react-style, revise the plan at checkpoints or when stuck."""

from __future__ import annotations

from synthorg.domain import TerminationReason
from synthorg.engine.native.phases import plan_phase, restore_plan, written_plan
from synthorg.engine.native.prompts import ASK_PLAN, HYBRID, review_prompt, stuck_prompt
from synthorg.engine.native.runtime import NativeLoop, control_tools
from synthorg.engine.native.tools import ToolSet
from synthorg.engine.native.turn import Replied, TurnEngine
from synthorg.engine.protocol import LoopContext
from synthorg.engine.termination import Terminated


class HybridLoop(NativeLoop):
    """A plan up front, then free react turns with the plan revisable at any time.

    Every ``review_every`` turns the plan is shown for review (a checkpoint); when the agent
    repeats itself it is asked to re-plan, and after ``max_revisions_when_stuck`` such
    revisions the run ends ERROR. COMPLETED on ``finish`` or a reply without tool calls.
    """

    loop_type = "hybrid"
    prompt = HYBRID

    async def _run(self, engine: TurnEngine, work: ToolSet, context: LoopContext) -> str:
        s = self._deps.settings
        restored = restore_plan(context.prior_events)
        if restored is not None:
            steps = restored[0]
        else:
            await engine.say(ASK_PLAN)
            steps = await plan_phase(
                engine, work.with_tools(*control_tools("write_plan")), s.planning_attempts
            )
        tools = work.with_tools(*control_tools("write_plan", "finish"))
        revisions, since_review = 0, 0
        while True:
            outcome = await engine.turn(tools)
            if isinstance(outcome, Replied):
                return outcome.text
            revised = written_plan(outcome)
            steps, since_review = (revised, 0) if revised else (steps, since_review + 1)
            if outcome.repeated is not None:
                revisions += 1
                if revisions > s.max_revisions_when_stuck:
                    raise Terminated(TerminationReason.ERROR, f"stuck: repeated {outcome.repeated}")
                engine.forget_repetition()
                await engine.say(stuck_prompt(outcome.repeated))
            elif since_review >= s.review_every:
                since_review = 0
                await engine.say(review_prompt(steps, engine.turns))
