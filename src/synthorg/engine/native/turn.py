"""The turn engine shared by every native loop: model call -> actions -> tools -> observations.

Every event goes through the run's sink, whose answer is honoured at once: a stop reason ends
the turn, and actions that did not run get a 'not executed' observation so the log stays
consistent for resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from synthorg.domain import (
    ActionEvent,
    CheckpointEvent,
    ConfirmationDecisionEvent,
    ConfirmationRequestEvent,
    ConversationEvent,
    ErrorEvent,
    ExecutionResult,
    MessageEvent,
    ObservationEvent,
    PendingAction,
    TerminationReason,
    TokenUsage,
    new_id,
)
from synthorg.domain.ids import is_valid_id
from synthorg.engine.native.errors import ModelBudgetExhausted, ModelCallError
from synthorg.engine.native.history import NOT_EXECUTED, History, rebuild_messages
from synthorg.engine.native.model import ModelClient, ModelReply
from synthorg.engine.native.prompts import RESUMED
from synthorg.engine.native.tools.base import (
    Finish,
    ParsedCall,
    Signal,
    ToolResult,
    ToolSet,
)
from synthorg.engine.protocol import LoopContext
from synthorg.engine.termination import Terminated, TurnLedger, ledger_result


@dataclass(frozen=True)
class CheckpointUnderWay:
    """A checkpoint still being written of a state the action cannot change (the layer under
    the run's still-empty overlay): the action may start now. Its event is logged once the
    task ends, before the action's observation, so the log reads as if it came first; a
    process that dies meanwhile logs neither (the log never names a checkpoint not made)."""

    task: asyncio.Task[CheckpointEvent]


CheckpointHook = Callable[[str], Awaitable[CheckpointEvent | CheckpointUnderWay | None]]
"""Snapshot the workspace before the action with this id; the event to log, if one was made
(or is being made)."""


@dataclass(frozen=True)
class Replied:
    """The model answered in prose, without tool calls."""

    text: str


@dataclass(frozen=True)
class Acted:
    """The model's tool calls ran (none of them was finish)."""

    signals: tuple[Signal, ...] = ()
    repeated: str | None = None


TurnOutcome = Replied | Acted
"""How a turn ended when the run goes on; a stop raises ``Terminated``, finish ``Finished``."""


class Finished(Exception):  # control flow: the agent called finish
    """The agent called ``finish``; the run completes with its message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TurnEngine:
    """One run's conversation with the model and the tools."""

    def __init__(
        self,
        context: LoopContext,
        loop_type: str,
        model: ModelClient,
        *,
        checkpoint: CheckpointHook | None = None,
        settle: CheckpointHook | None = None,
        stuck_after: int = 3,
    ) -> None:
        self.context = context
        self.loop_type = loop_type
        self._model = model
        self._checkpoint = checkpoint
        self._settle = settle
        self._stuck_after = stuck_after
        self.history = History("")
        self.ledger = TurnLedger(TokenUsage())
        self._seen_ids: set[str] = set()
        self._last_signature: str | None = None
        self._repeats = 0

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self, system_prompt: str) -> None:
        """Baseline the cost ledger and seed the history (fresh, or rebuilt when resumed)."""
        self.ledger = TurnLedger(await self.context.gateway.usage())
        self.history = History(system_prompt)
        prior = rebuild_messages(self.context.prior_events)
        self._seen_ids = {
            e.event.action_id for e in self.context.prior_events if isinstance(e.event, ActionEvent)
        }
        # Fresh unless a person's message was logged before: system notes written before the
        # loop starts (an isolation warning, the in-place notice) are not a conversation yet.
        asked = any(
            isinstance(e.event, MessageEvent) and e.event.role == "user"
            for e in self.context.prior_events
        )
        if not asked:
            prior.insert(0, {"role": "user", "content": self.context.task.prompt})
            self.history.extend(prior)
            await self.emit(MessageEvent(role="user", text=self.context.task.prompt))
            return
        self.history.extend(prior)
        await self.say(RESUMED)

    async def emit(self, event: ConversationEvent) -> None:
        """Report one event; the sink raises ``Terminated`` when the run must stop."""
        await self.context.emit(event)

    async def say(self, text: str) -> None:
        """A loop instruction: a user turn for the model, a system message in the log."""
        self.history.add_user(text)
        await self.emit(MessageEvent(role="system", text=text))

    async def run(self, system_prompt: str, body: Callable[[], Awaitable[str]]) -> ExecutionResult:
        """Start, run ``body`` to its final message (COMPLETED), or to the stop it raised."""
        try:
            await self.start(system_prompt)
            message = await body()
        except Finished as finish:
            message = finish.message
        except Terminated as stop:
            return await self.result(stop.reason, error=stop.message)
        return await self.result(TerminationReason.COMPLETED, final_message=message)

    async def result(
        self, reason: TerminationReason, *, final_message: str = "", error: str | None = None
    ) -> ExecutionResult:
        """The run's result from the ledger; its error logged (the runner closes the run)."""
        if error is not None:
            await self._record(ErrorEvent(message=error, code=reason.value))
        return ledger_result(
            self.context,
            self.ledger,
            await self.context.gateway.usage(),
            loop_type=self.loop_type,
            reason=reason,
            final_message=final_message,
            error=error,
        )

    def forget_repetition(self) -> None:
        """Start counting repeats afresh (the loop reacted to the agent being stuck)."""
        self._last_signature, self._repeats = None, 0

    @property
    def turns(self) -> int:
        """Model calls made in this run."""
        return len(self.ledger.turns)

    # -- one turn -------------------------------------------------------------------------
    async def turn(self, tools: ToolSet) -> TurnOutcome:
        """Steering, one model call, its actions run (after confirmation), observations logged.

        A stop (the sink's, the turn cap, a failed model call) is raised as ``Terminated``.
        """
        for text in self.context.control.drain_steering():
            # Logged by whoever steered (durable before it was acknowledged): read, not re-logged.
            self.history.add_user(text)
        if self.turns >= self.context.max_turns:
            raise Terminated(TerminationReason.MAX_TURNS, f"reached the turn cap of {self.turns}")
        try:
            reply = await self._model.complete(self.history.messages, tools.specs)
        except ModelBudgetExhausted as exc:
            raise Terminated(TerminationReason.BUDGET_EXHAUSTED, exc.message) from exc
        except ModelCallError as exc:
            raise Terminated(TerminationReason.ERROR, f"model call failed: {exc.message}") from exc
        calls = [tools.parse(self._action_id(c.id), c.name, c.arguments) for c in reply.calls]
        accumulated = await self.context.gateway.usage()
        usage = self.ledger.record(accumulated, [c.name for c in calls]).usage
        # The history uses our action ids as call ids, exactly as a rebuilt history will.
        self.history.add_assistant(_with_ids(reply, calls))
        if not calls:
            await self.emit(
                MessageEvent(kind="message", role="assistant", text=reply.text, usage=usage)
            )
            return Replied(reply.text)
        repeated = self._repetition(calls)
        signals: list[Signal] = []
        finished: str | None = None
        pending = list(calls)
        try:
            for i, call in enumerate(calls):
                await self.emit(
                    ActionEvent(
                        kind="action",
                        action_id=call.call_id,
                        tool_name=call.name,
                        arguments=call.arguments,
                        summary=call.summary(),
                        thought=reply.text if i == 0 else "",
                        risk=call.risk(),
                        usage=usage if i == 0 else None,
                    )
                )
            rejected = await self._confirm(calls)
            while pending:
                result = await self._execute(pending[0], rejected)
                call = pending.pop(0)
                self.history.add_tool_result(call.call_id, result.content)
                if result.signal is not None:
                    signals.append(result.signal)
                    if isinstance(result.signal, Finish):
                        finished = result.signal.message
                await self.emit(
                    ObservationEvent(
                        action_id=call.call_id,
                        content=result.content,
                        is_error=result.is_error,
                        exit_code=result.exit_code,
                    )
                )
        except Terminated as stop:
            await self._abandon(pending, stop.reason)
            raise
        if finished is not None:
            raise Finished(finished)
        return Acted(signals=tuple(signals), repeated=repeated)

    # -- helpers --------------------------------------------------------------------------
    async def _record(self, event: ConversationEvent) -> None:
        """Log an event of a run that is already ending: a late stop changes nothing."""
        with contextlib.suppress(Terminated):
            await self.emit(event)

    async def _confirm(self, calls: list[ParsedCall]) -> dict[str, str]:
        """Wait for a decision on the calls the policy holds back; rejected id -> message."""
        policy = self.context.confirmation_policy
        held = [c for c in calls if c.valid and policy.requires_confirmation(c.risk(), c.name)]
        if not held:
            return {}
        pending = self.context.control.expect_decision(frozenset(c.call_id for c in held))
        try:
            await self.emit(
                ConfirmationRequestEvent(
                    pending=tuple(
                        PendingAction(
                            action_id=c.call_id,
                            tool_name=c.name,
                            summary=c.summary(),
                            arguments=c.arguments,
                            risk=c.risk(),
                        )
                        for c in held
                    )
                )
            )
            decision = await pending
        finally:
            pending.cancel()  # no-op once decided; withdraws the request when the run stops
        await self.emit(
            ConfirmationDecisionEvent(
                accepted=tuple(sorted(decision.accepted)),
                rejected=tuple(sorted(decision.rejected)),
                reason=decision.reason,
                approver=decision.approver,
            )
        )
        why = f": {decision.reason}" if decision.reason else ""
        return {i: f"rejected by {decision.approver}{why}; not executed" for i in decision.rejected}

    async def _execute(self, call: ParsedCall, rejected: dict[str, str]) -> ToolResult:
        if call.error is not None:
            return ToolResult(content=call.error, is_error=True)
        if call.call_id in rejected:
            return ToolResult(content=rejected[call.call_id], is_error=True)
        assert call.tool is not None
        mutates = call.tool.mutates(call.args)
        under_way: CheckpointUnderWay | None = None
        if self._checkpoint is not None and mutates:
            made = await self._checkpoint(call.call_id)
            if isinstance(made, CheckpointUnderWay):
                under_way = made  # the action starts now: logged before its observation
            else:
                await self._log_checkpoint(made)
        try:
            result = await call.tool.run(call.args)
        except asyncio.CancelledError:
            await self._log_checkpoint(under_way)
            raise
        except Exception as exc:  # the executor itself failed: the run cannot go on safely
            await self._log_checkpoint(under_way)
            message = f"tool {call.name} failed to run: {type(exc).__name__}: {exc}"
            await self._record(
                ObservationEvent(
                    action_id=call.call_id, content=message, is_error=True, non_retryable=True
                )
            )
            raise Terminated(TerminationReason.ERROR, message) from exc
        await self._log_checkpoint(under_way)  # before the observation
        if self._settle is not None and mutates:
            # Before the observation: an action logged as done has its effect published.
            await self._log_checkpoint(await self._settle(call.call_id))
        return result

    async def _log_checkpoint(self, made: CheckpointEvent | CheckpointUnderWay | None) -> None:
        if not isinstance(made, CheckpointUnderWay):
            if made is not None:
                await self.emit(made)
            return
        try:
            event = await asyncio.shield(made.task)
        except asyncio.CancelledError:
            # Stopped while it is written: the action ran, so the checkpoint before it is
            # still logged (waited for once more), then the stop goes on.
            event = await asyncio.shield(made.task)
            await self.emit(event)
            raise
        await self.emit(event)

    async def _abandon(self, pending: list[ParsedCall], reason: TerminationReason) -> None:
        for call in pending:
            await self._record(
                ObservationEvent(
                    action_id=call.call_id,
                    content=f"{NOT_EXECUTED} (run {reason.value})",
                    is_error=True,
                )
            )

    def _action_id(self, call_id: str) -> str:
        action_id = call_id if is_valid_id(call_id) and call_id not in self._seen_ids else ""
        action_id = action_id or new_id("act")
        self._seen_ids.add(action_id)
        return action_id

    def _repetition(self, calls: list[ParsedCall]) -> str | None:
        """The repeated action when this turn repeats the previous one ``stuck_after`` times."""
        signature = json.dumps([[c.name, c.arguments] for c in calls], sort_keys=True)
        self._repeats = self._repeats + 1 if signature == self._last_signature else 1
        self._last_signature = signature
        if self._repeats >= self._stuck_after:
            return "; ".join(c.summary() for c in calls)
        return None


def _with_ids(reply: ModelReply, calls: list[ParsedCall]) -> ModelReply:
    renamed = tuple(replace(c, id=p.call_id) for c, p in zip(reply.calls, calls, strict=True))
    return replace(reply, calls=renamed)
