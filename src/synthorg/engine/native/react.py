"""The react loop: reason, act, observe - native tool calling until finish."""

from __future__ import annotations

from synthorg.domain import ExecutionResult, TerminationReason
from synthorg.engine.native.phases import Ending, ending_of
from synthorg.engine.native.prompts import REACT
from synthorg.engine.native.runtime import NativeLoopDeps, control_tools, native_run
from synthorg.engine.native.tools import ToolSet
from synthorg.engine.native.turn import TurnEngine
from synthorg.engine.protocol import LoopContext


class ReactLoop:
    """One model call per turn; its tool calls run and their observations feed the next.

    Ends COMPLETED on ``finish`` or on a reply without tool calls (the agent's answer; NO_OP
    if nothing was done), ERROR when stuck (the same action ``stuck_after`` turns in a row),
    MAX_TURNS at the cap, or whatever the sink asks for.
    """

    def __init__(self, deps: NativeLoopDeps) -> None:
        self._deps = deps

    def get_loop_type(self) -> str:
        return "react"

    async def execute(self, context: LoopContext) -> ExecutionResult:
        async with native_run(self._deps, context, "react", REACT) as (engine, work, stop):
            end = await self._run(engine, work) if stop is None else Ending(stop)
            return await engine.result(end.reason, final_message=end.message, error=end.error)

    async def _run(self, engine: TurnEngine, work: ToolSet) -> Ending:
        tools = work.with_tools(*control_tools("finish"))
        while True:
            outcome = await engine.turn(tools)
            if (end := ending_of(outcome)) is not None:
                return end
            if outcome.reply_text is not None:
                return Ending(TerminationReason.COMPLETED, message=outcome.reply_text)
            if outcome.repeated is not None:
                return Ending(TerminationReason.ERROR, error=f"stuck: repeated {outcome.repeated}")
