"""OpenHandsLoop: the real OpenHands SDK as a SynthOrg execution loop (seed 000's execute flow).

1. take the run's one bearer from the context (the service minted it, explicit provider
   binding checked there);
2. build the run spec with the stable per-task conversation id (the SynthOrg conversation id,
   so a resumed run re-attaches to the persisted SDK conversation);
3. build the conversation with the factory (the sandboxed runtime);
4. stream: every record becomes domain events through ``context.emit``, whose stop reason
   (budget / shutdown / cancellation / pause) ends the run and tears the sandbox down;
5. each action (and each agent message) is one TurnRecord with its cost delta taken from the
   runtime's running cost, so the deltas sum to the run total;
6. the result goes back to the runner, whose ``finish_run`` applies NO_OP, logs
   EXECUTION_LOOP_TERMINATED and records the final status.

tool_invoker, provider clients, completion config and streaming are unused by design: OpenHands
runs its own tools and reaches models only through the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from synthorg.domain import (
    ConfirmationDecisionEvent,
    ConfirmationPolicy,
    ConfirmationRequestEvent,
    ConversationEvent,
    ErrorEvent,
    ExecutionResult,
    TerminationReason,
    TokenUsage,
)
from synthorg.engine.control import Decision
from synthorg.engine.openhands.config import OpenHandsLoopDeps
from synthorg.engine.openhands.conversation import (
    OpenHandsConversation,
    OpenHandsOutcome,
    OpenHandsRunSpec,
)
from synthorg.engine.openhands.events import (
    MAX_ITERATIONS_CODE,
    OpenHandsEvent,
    RuntimeNotice,
    RuntimeRecord,
)
from synthorg.engine.openhands.mapping import EventMapper, RunCosts, notice_error, pending_actions
from synthorg.engine.protocol import ExecutionLoop, LoopContext
from synthorg.engine.registry import LoopDependencies
from synthorg.engine.resume import host_answers, undelivered_messages
from synthorg.engine.termination import Terminated, TurnLedger, ledger_result
from synthorg.errors import SynthOrgError
from synthorg.gateway.wire import BUDGET_ERROR_CODES, COST_CEILING_REACHED
from synthorg.logging import get_logger

LOOP_TYPE = "openhands"
COST_CEILING_CODE = COST_CEILING_REACHED
"""The gateway's error code when it kills a run at its cost ceiling."""
_log = get_logger("synthorg.engine.openhands")
_POLICIES = {
    ConfirmationPolicy.NEVER: "never",
    ConfirmationPolicy.RISKY: "risky",
    ConfirmationPolicy.ALWAYS: "always",
}


class OpenHandsLoop:
    """The fourth execution loop: one sandboxed OpenHands SDK conversation per run."""

    def __init__(self, deps: OpenHandsLoopDeps) -> None:
        self._deps = deps

    def get_loop_type(self) -> str:
        return LOOP_TYPE

    async def execute(self, context: LoopContext) -> ExecutionResult:
        spec = self.run_spec(context)
        run = _Run(self._deps, context)
        for text in spec.resume_messages:  # logged already; the runtime's echo is not news
            run.expect_echo(text)
        return await run.drive(self._deps.conversation_factory(spec))

    def run_spec(self, context: LoopContext) -> OpenHandsRunSpec:
        """Step 2: the spec for this run; the conversation id is the stable SynthOrg one."""
        deps = self._deps
        policy = context.confirmation_policy
        return OpenHandsRunSpec(
            task_prompt=context.task.prompt,
            model=context.model,
            gateway_base_url=deps.gateway_base_url,
            gateway_token=context.gateway.bearer,
            mcp_base_url=deps.mcp_base_url,
            workspace_path=deps.workspace_path,
            persistence_dir=deps.persistence_dir,
            conversation_id=context.conversation_id,
            max_turns=deps.config.max_turns or context.max_turns,
            project_id=context.task.project_id,
            confirmation_policy=_POLICIES[policy],
            risk_threshold="high",
            # With "risky" the model must declare a risk for every action.
            security_analyzer=policy is ConfirmationPolicy.RISKY,
            input_cost_per_token=deps.input_cost_per_token,
            output_cost_per_token=deps.output_cost_per_token,
            resume_messages=undelivered_messages(context.prior_events) if context.resumed else (),
            resume_answers=dict(host_answers(context.prior_events)) if context.resumed else {},
        )


class _Run:
    """One execution: the sink the runtime feeds, decisions, control forwarding, the result."""

    def __init__(self, deps: OpenHandsLoopDeps, context: LoopContext) -> None:
        self._deps = deps
        self._context = context
        self._ledger = TurnLedger(TokenUsage())
        self._costs = RunCosts()
        self._mapper = EventMapper()
        self._lock = asyncio.Lock()
        self._stop: TerminationReason | None = None
        self._conversation: OpenHandsConversation | None = None
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._decision: asyncio.Future[Decision] | None = None
        self._errors_logged: set[str] = set()
        self._last_reply = ""

    # -- the run ---------------------------------------------------------------------------
    def expect_echo(self, text: str) -> None:
        """A user message already in the log that the runtime will echo."""
        self._mapper.expect_echo(text)

    async def drive(self, conversation: OpenHandsConversation) -> ExecutionResult:
        self._conversation = conversation
        forwarded: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        control = self._context.control
        control.forwarders.append(forwarded)
        for text in control.drain_steering():  # steered before the runtime was up
            forwarded.put_nowait({"type": "message", "text": text})
        started = self._deps.clock()
        # Side tasks (control forwarding, awaiting a decision) live in a task group: one that
        # fails ends the run at once with its error instead of hiding it until the end.
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                self._spawn(self._forward(forwarded))
                try:
                    outcome = await conversation.run(self._sink)
                except SynthOrgError as exc:  # the sandbox or runtime failed at the boundary
                    outcome = OpenHandsOutcome(error=str(exc), error_code="runtime_failed")
                finally:
                    self._cancel_side_tasks()
        finally:
            self._group = None
            control.forwarders.remove(forwarded)
        _log.info(
            "OPENHANDS_RUN_ENDED",
            conversation_id=self._context.conversation_id,
            seconds=round(self._deps.clock() - started, 3),
            outcome=outcome.model_dump(exclude={"final_message"}),
        )
        return await self._result(outcome)

    async def _result(self, outcome: OpenHandsOutcome) -> ExecutionResult:
        if self._stop is not None:
            return await self.end(self._stop, emit=False)
        if outcome.stopped or outcome.paused:
            return await self.end(TerminationReason.PAUSED, emit=False)
        if outcome.finished:
            return await self.end(
                TerminationReason.COMPLETED, message=outcome.final_message or self._last_reply
            )
        error = outcome.error or "the OpenHands run ended without a result"
        reason = TerminationReason.ERROR
        if outcome.error_code == MAX_ITERATIONS_CODE:
            reason = TerminationReason.MAX_TURNS
        elif outcome.error_code in BUDGET_ERROR_CODES:
            reason = TerminationReason.BUDGET_EXHAUSTED  # the gateway's authoritative refusal
        return await self.end(reason, error=error, code=outcome.error_code or reason.value)

    async def end(
        self,
        reason: TerminationReason,
        *,
        message: str = "",
        error: str | None = None,
        code: str | None = None,
        emit: bool = True,
    ) -> ExecutionResult:
        """The loop's result from its ledger; the error logged once (the runner closes the run)."""
        if emit and error is not None and error not in self._errors_logged:
            with contextlib.suppress(Terminated):  # the run is ending either way
                await self._context.emit(ErrorEvent(message=error, code=code or reason.value))
        return ledger_result(
            self._context,
            self._ledger,
            self._costs.accumulated(),
            loop_type=LOOP_TYPE,
            reason=reason,
            final_message=message,
            error=error,
        )

    # -- the sink: runtime records -> domain events ----------------------------------------
    async def _sink(self, record: RuntimeRecord) -> bool:
        self._costs.observe(record)
        if isinstance(record, RuntimeNotice):
            return await self._notice(record)
        if record.kind == "action":
            return await self._emit(self._mapper.action(record, self._turn(record)))
        if record.kind == "message":
            usage = self._turn(record) if record.is_turn else None
            if record.source == "agent":
                self._last_reply = record.text
            event = self._mapper.message(record, usage)
            return event is None or await self._emit(event)
        if record.kind == "observation":
            return await self._emit(self._mapper.observation(record))
        if record.kind == "error":
            self._errors_logged.add(record.text)
            return await self._emit(ErrorEvent(message=record.text, code=record.code or "error"))
        return True  # finished: the loop ends the run (after the NO_OP check)

    def _turn(self, record: OpenHandsEvent) -> TokenUsage:
        """Close a turn at the runtime's running cost; its figures for the event."""
        self._costs.add_tokens(record)
        names = [record.tool_name] if record.tool_name else []
        return self._ledger.record(self._costs.accumulated(), names).usage

    async def _notice(self, notice: RuntimeNotice) -> bool:
        if notice.kind == "confirmation_request" and notice.pending:
            return await self._request_decision(notice)
        error = notice_error(notice)
        return error is None or await self._emit(error)

    async def _request_decision(self, notice: RuntimeNotice) -> bool:
        ids = frozenset(p.action_id for p in notice.pending)
        # Pending before it is announced: an approver who answers at once is never refused.
        future = self._context.control.expect_decision(ids)
        self._decision = future
        request = ConfirmationRequestEvent(pending=pending_actions(notice.pending, self._mapper))
        if not await self._emit(request):
            future.cancel()
            return False
        self._spawn(self._await_decision(future))
        return True

    async def _await_decision(self, future: asyncio.Future[Decision]) -> None:
        decision = await future
        event = ConfirmationDecisionEvent(
            accepted=tuple(sorted(decision.accepted)),
            rejected=tuple(sorted(decision.rejected)),
            reason=decision.reason,
            approver=decision.approver,
        )
        assert self._conversation is not None
        if not await self._emit(event):
            await self._conversation.stop()
            return
        # Forwarded only once the decision is durable, so the log orders it before its effects.
        await self._conversation.send_control(
            {
                "type": "confirm",
                "accept": sorted(decision.accepted),
                "reject": sorted(decision.rejected),
                "reason": decision.reason,
            }
        )

    async def _emit(self, event: ConversationEvent) -> bool:
        """Through the runner's sink; False (and remembered) once it names a stop reason."""
        async with self._lock:
            if self._stop is not None:
                return False
            try:
                await self._context.emit(event)
            except Terminated as stop:
                self._stop = stop.reason
                return False
        return True

    # -- control forwarding ----------------------------------------------------------------
    async def _forward(self, commands: asyncio.Queue[dict[str, object]]) -> None:
        assert self._conversation is not None
        while True:
            command = await commands.get()
            kind = command.get("type")
            if kind == "message":
                self._context.control.drain_steering()  # delivered here, not by a native turn
                self._mapper.expect_echo(str(command.get("text", "")))
                await self._conversation.send_control(command)
            elif kind in ("pause", "interrupt", "resume"):
                await self._conversation.send_control(command)
            # "confirm" is sent by _await_decision after the decision event is logged.

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self._group is not None, "side tasks run only while the conversation runs"
        self._tasks.add(self._group.create_task(coro))

    def _cancel_side_tasks(self) -> None:
        """End the side tasks; the task group waits for them."""
        if self._decision is not None:
            self._decision.cancel()  # withdraws a pending request; no-op once decided
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()


def make_loop_with_callback(loop: OpenHandsLoop, callback: object = None) -> OpenHandsLoop:
    """The loop unchanged: OpenHands resumes at task level from its own persisted state, so
    there is no per-tool-exec checkpoint callback to wire (that is native-loop-specific)."""
    return loop


def openhands_factory(deps: LoopDependencies) -> ExecutionLoop:
    """Registry factory; fails loud (MissingLoopDepsError) without OpenHandsLoopDeps."""
    return OpenHandsLoop(deps.require(OpenHandsLoopDeps, LOOP_TYPE))
