"""The runner: wires a loop to the durable event log, the checkers and status transitions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from synthorg.domain import (
    ConversationEvent,
    ConversationStatus,
    ErrorEvent,
    ExecutionResult,
    ObservationEvent,
    StatusChangeEvent,
    TerminationReason,
    TokenUsage,
)
from synthorg.engine.checkers import RunCheckers
from synthorg.engine.control import RunControl
from synthorg.engine.protocol import ExecutionLoop, LoopContext
from synthorg.engine.termination import log_termination
from synthorg.store.protocol import ConversationStore

_TURN_KINDS = frozenset({"action", "message"})


class RunSink:
    """The EventSink of one run: durable append first, then the checkers.

    Fan-out happens through the store's live tail, so nobody sees an event that is not
    durable yet.
    """

    def __init__(
        self,
        store: ConversationStore,
        conversation_id: str,
        checkers: RunCheckers,
        control: RunControl,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._conversation_id = conversation_id
        self._checkers = checkers
        self._control = control
        self._clock = clock
        self.stop_reason: TerminationReason | None = None

    async def __call__(self, event: ConversationEvent) -> TerminationReason | None:
        await self._store.append(self._conversation_id, event)
        if event.kind == "confirmation_request":
            await self._transition(
                ConversationStatus.WAITING_CONFIRMATION, "waiting for a decision"
            )
        elif event.kind == "confirmation_decision":
            await self._transition(ConversationStatus.RUNNING, f"decided by {event.approver}")
        reason = await self._checkers.stop_reason()
        if reason is None and self._control.pause_requested and event.kind in _TURN_KINDS:
            reason = TerminationReason.PAUSED
        if reason is not None and self.stop_reason is None:
            self.stop_reason = reason
        return reason

    async def _transition(self, status: ConversationStatus, why: str) -> None:
        record = await self._store.get_conversation(self._conversation_id)
        if record.status is status:
            return
        await self._store.append(
            self._conversation_id, StatusChangeEvent(old=record.status, new=status, reason=why)
        )
        await self._store.save_conversation(
            record.model_copy(update={"status": status, "updated_at": self._clock()})
        )


class LoopRunner:
    """Runs a loop for one conversation and persists how it ended.

    Whatever happens inside the loop (a normal end, an exception, cancellation of the
    awaiting task) the conversation leaves RUNNING with an explicit, evented status.
    """

    def __init__(
        self, store: ConversationStore, *, clock: Callable[[], datetime] | None = None
    ) -> None:
        self._store = store
        self._clock = clock or (lambda: datetime.now(UTC))

    def sink(self, conversation_id: str, checkers: RunCheckers, control: RunControl) -> RunSink:
        """The event sink a loop context should carry."""
        return RunSink(self._store, conversation_id, checkers, control, self._clock)

    async def run(
        self,
        loop: ExecutionLoop,
        context: LoopContext,
        *,
        requested_stop: Callable[[], TerminationReason | None] = lambda: None,
    ) -> ExecutionResult:
        """Execute ``loop`` and record the terminal transition.

        When the awaiting task is cancelled, ``requested_stop`` says whether the caller asked
        for it and why (an interrupt leaves the conversation PAUSED, a shutdown SHUTDOWN, a
        cancel CANCELLED): then the result is returned. A cancellation nobody requested is
        recorded as CANCELLED and propagated.
        """
        await self._set_status(context, ConversationStatus.RUNNING, "run started")
        try:
            result = await loop.execute(context)
        except asyncio.CancelledError:
            requested = requested_stop()
            reason = requested or TerminationReason.CANCELLED
            result = await asyncio.shield(self._crashed(loop, context, reason, None))
            await asyncio.shield(self._close_dangling_actions(context, reason))
            await asyncio.shield(self._finish(context, result))
            task = asyncio.current_task()
            if requested is None or task is None:
                raise
            task.uncancel()
            return result
        except Exception as exc:  # the loop failed; the conversation must not stay running
            message = f"{type(exc).__name__}: {exc}"
            result = await self._crashed(loop, context, TerminationReason.ERROR, message)
            await self._store.append(
                context.conversation_id, ErrorEvent(message=message, code="loop_crashed")
            )
            await self._finish(context, result)
            return result
        await self._finish(context, result)
        return result

    async def _close_dangling_actions(
        self, context: LoopContext, reason: TerminationReason
    ) -> None:
        """Give each action of this run without an observation one saying it was cut off.

        A resumed run then sees every tool call answered, and nobody mistakes the unknown
        effect of an interrupted tool for a success.
        """
        # Events before this run were answered when that run ended (or by reconciliation).
        after = context.prior_events[-1].seq if context.prior_events else 0
        open_actions: dict[str, None] = {}
        while True:
            page = await self._store.history(context.conversation_id, after=after, limit=500)
            for stored in page:
                event = stored.event
                if event.kind == "action":
                    open_actions[event.action_id] = None
                elif event.kind == "observation":
                    open_actions.pop(event.action_id, None)
            if len(page) < 500:
                break
            after = page[-1].seq
        for action_id in open_actions:
            await self._store.append(
                context.conversation_id,
                ObservationEvent(
                    action_id=action_id,
                    content=f"the run was stopped ({reason.value}) while this tool was in "
                    "progress; its effect is unknown",
                    is_error=True,
                    non_retryable=True,
                ),
            )

    async def _crashed(
        self,
        loop: ExecutionLoop,
        context: LoopContext,
        reason: TerminationReason,
        error: str | None,
    ) -> ExecutionResult:
        # The loop could not report its turns; what the run spent is still in the gateway's
        # ledger (one execution per run), so the conversation's totals stay true.
        try:
            usage = await context.gateway.usage()
        except Exception:  # the ledger may be the thing that failed
            usage = TokenUsage()
        result = ExecutionResult(
            usage=usage,
            execution_id=context.execution_id,
            conversation_id=context.conversation_id,
            loop_type=loop.get_loop_type(),
            termination_reason=reason,
            error=error,
            resumed=context.resumed,
            branch=context.workspace.branch,
        )
        log_termination(result)
        return result

    async def _finish(self, context: LoopContext, result: ExecutionResult) -> None:
        status = result.termination_reason.conversation_status()
        record = await self._store.get_conversation(context.conversation_id)
        await self._store.append(
            context.conversation_id,
            StatusChangeEvent(
                old=record.status,
                new=status,
                reason=result.error or result.final_message or result.termination_reason.value,
                termination_reason=result.termination_reason.value,
            ),
        )
        await self._store.save_conversation(
            record.model_copy(
                update={
                    "status": status,
                    "termination_reason": result.termination_reason,
                    "usage": record.usage + result.usage,
                    "turns": record.turns + len(result.turns),
                    "error": result.error,
                    "updated_at": self._clock(),
                }
            )
        )

    async def _set_status(self, context: LoopContext, status: ConversationStatus, why: str) -> None:
        record = await self._store.get_conversation(context.conversation_id)
        await self._store.append(
            context.conversation_id, StatusChangeEvent(old=record.status, new=status, reason=why)
        )
        await self._store.save_conversation(
            record.model_copy(
                update={
                    "status": status,
                    "execution_id": context.execution_id,
                    "runs": record.runs + 1,
                    "updated_at": self._clock(),
                }
            )
        )
