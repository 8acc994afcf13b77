"""The react loop: reason, act, observe - native tool calling until finish."""

from __future__ import annotations

from synthorg.domain import TerminationReason
from synthorg.engine.native.prompts import REACT
from synthorg.engine.native.runtime import NativeLoop, control_tools
from synthorg.engine.native.tools import ToolSet
from synthorg.engine.native.turn import Replied, TurnEngine
from synthorg.engine.protocol import LoopContext
from synthorg.engine.termination import Terminated


class ReactLoop(NativeLoop):
    """One model call per turn; its tool calls run and their observations feed the next.

    Ends COMPLETED on ``finish`` or on a reply without tool calls (the agent's answer; NO_OP
    if nothing was done), ERROR when stuck (the same action ``stuck_after`` turns in a row),
    MAX_TURNS at the cap, or whatever the sink asks for.
    """

    loop_type = "react"
    prompt = REACT

    async def _run(self, engine: TurnEngine, work: ToolSet, context: LoopContext) -> str:
        tools = work.with_tools(*control_tools("finish"))
        while True:
            outcome = await engine.turn(tools)
            if isinstance(outcome, Replied):
                return outcome.text
            if outcome.repeated is not None:
                raise Terminated(TerminationReason.ERROR, f"stuck: repeated {outcome.repeated}")
