"""The runner: wires a loop to the durable event log and the checkers, and closes every run.

``LoopRunner.finish_run`` is the one place a run ends: the NO_OP rule, the closing event,
landing, then (``_close``) EXECUTION_LOOP_TERMINATED and the final status transition. A run
whose loop never started (stopped during setup, refused by the host) ends through
``finish_unstarted`` and the same ``_close``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from synthorg.domain import (
    ActionEvent,
    ConversationEvent,
    ConversationRecord,
    ConversationStatus,
    ErrorEvent,
    ExecutionResult,
    FinishedEvent,
    ObservationEvent,
    TerminationReason,
    TokenUsage,
    TurnRecord,
)
from synthorg.engine.checkers import RunCheckers
from synthorg.engine.control import RunControl
from synthorg.engine.lifecycle import transition
from synthorg.engine.no_op import NO_OP_MESSAGE, WorkspaceChanged, is_no_op
from synthorg.engine.protocol import ExecutionLoop, LoopContext
from synthorg.engine.termination import Terminated, build_result, log_termination
from synthorg.errors import SynthOrgError
from synthorg.hostwork import HostWorkExceeded
from synthorg.store.protocol import ConversationStore
from synthorg.store.reconcile import open_actions

_TURN_KINDS = frozenset({"action", "message"})


class LandingRefused(SynthOrgError):
    """The commit gate refused to land a completed run; the message says why and what to do."""

    def __init__(self, message: str, code: str = "commit_gate_refused") -> None:
        super().__init__(message)
        self.code = code


Lander = Callable[[ExecutionResult], Awaitable[ExecutionResult]]
"""Lands a completed run (the commit gate); raises LandingRefused to fail it."""


class RunSink:
    """The EventSink of one run: durable append first, then the checkers.

    The first stop reason found is raised as ``Terminated``; events after it (the run
    winding down: observations of abandoned actions, the closing error) are only recorded.
    Fan-out happens through the store's live tail, so nobody sees an event that is not
    durable yet. The sink also keeps the turns it saw, so a run cut short still reports them.
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
        self.turns: list[TurnRecord] = []
        self.finished_logged = False
        self.started: ConversationRecord | None = None
        """The record as the run started: the base its closing totals are computed from (the
        store moved the record's totals with each turn meanwhile)."""

    async def __call__(self, event: ConversationEvent) -> None:
        await self._store.append(self._conversation_id, event)
        self._observe(event)
        if event.kind == "confirmation_request":
            await self._transition(
                ConversationStatus.WAITING_CONFIRMATION, "waiting for a decision"
            )
        elif event.kind == "confirmation_decision":
            await self._transition(ConversationStatus.RUNNING, f"decided by {event.approver}")
        if self.stop_reason is not None:
            return
        reason = await self._checkers.stop_reason()
        if reason is None and self._control.pause_requested and event.kind in _TURN_KINDS:
            reason = TerminationReason.PAUSED
        if reason is not None:
            self.stop_reason = reason
            raise Terminated(reason)

    def _observe(self, event: ConversationEvent) -> None:
        # A turn is an event with figures (one model call); its other actions join it.
        tool = event.tool_name if isinstance(event, ActionEvent) else None
        if event.usage is not None:
            self.turns.append(
                TurnRecord(
                    turn_index=len(self.turns),
                    tool_names=(tool,) if tool else (),
                    tokens_in=event.usage.tokens_in,
                    tokens_out=event.usage.tokens_out,
                    cost_usd=event.usage.cost_usd,
                )
            )
        elif tool and self.turns:
            last = self.turns[-1]
            self.turns[-1] = last.model_copy(update={"tool_names": (*last.tool_names, tool)})
        elif event.kind == "finished":
            self.finished_logged = True

    async def _transition(self, status: ConversationStatus, why: str) -> None:
        await transition(
            self._store, self._conversation_id, status, why, clock=self._clock, only_if_changed=True
        )


class LoopRunner:
    """Runs a loop for one conversation and persists how it ended.

    Whatever happens inside the loop (a normal end, a stop, an exception, cancellation of
    the awaiting task) the conversation leaves RUNNING with an explicit, evented status.
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
        changed: WorkspaceChanged | None = None,
        land: Lander | None = None,
    ) -> ExecutionResult:
        """``execute`` then ``finish_run``: the whole run of ``loop``."""
        result = await self.execute(loop, context, requested_stop=requested_stop)
        return await asyncio.shield(self.finish_run(context, result, changed=changed, land=land))

    async def execute(
        self,
        loop: ExecutionLoop,
        context: LoopContext,
        *,
        requested_stop: Callable[[], TerminationReason | None] = lambda: None,
    ) -> ExecutionResult:
        """Mark the run RUNNING and execute ``loop``; the caller then calls ``finish_run``.

        When the awaiting task is cancelled, ``requested_stop`` says whether the caller asked
        for it and why (an interrupt leaves the conversation PAUSED, a shutdown SHUTDOWN, a
        cancel CANCELLED): then the result is returned. A cancellation nobody requested is
        finished here as CANCELLED and propagated.
        """
        mark = asyncio.ensure_future(
            transition(
                self._store,
                context.conversation_id,
                ConversationStatus.RUNNING,
                "run started",
                clock=self._clock,
                update=lambda record: {
                    "execution_id": context.execution_id,
                    "runs": record.runs + 1,
                    "usage": record.usage if context.prior_usage is None else context.prior_usage,
                },
            )
        )
        stopped_at_start = False
        try:
            started = await asyncio.shield(mark)
        except asyncio.CancelledError:
            # A stop while the run is marked RUNNING: the mark is written all the same (a
            # short write), then the stop ends the run below, as one during the loop does.
            started = await mark
            stopped_at_start = True
        if isinstance(context.emit, RunSink):
            context.emit.started = started
        try:
            if stopped_at_start:
                raise asyncio.CancelledError  # the task's own cancel, handled as one below
            return await loop.execute(context)
        except Terminated as stop:  # a loop that let the sink's stop through
            return await self._cut_short(loop, context, stop.reason, stop.message)
        except asyncio.CancelledError:
            requested = requested_stop()
            reason = requested or TerminationReason.CANCELLED
            result = await asyncio.shield(self._cut_short(loop, context, reason, None))
            task = asyncio.current_task()
            if requested is None or task is None:
                await asyncio.shield(self.finish_run(context, result))
                raise
            task.uncancel()
            return result
        except Exception as exc:  # the loop failed; the conversation must not stay running
            while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]  # a loop's task group failed: name the actual error
            reason, message = TerminationReason.ERROR, f"{type(exc).__name__}: {exc}"
            error = ErrorEvent(message=message, code="loop_crashed")
            if isinstance(exc, HostWorkExceeded):  # a checkpoint's host work, killed: FAILED
                reason, message = TerminationReason.BUDGET_EXHAUSTED, str(exc)
                error = ErrorEvent(message=message, code=exc.code, non_retryable=True)
            await self._store.append(context.conversation_id, error)
            return await self._cut_short(loop, context, reason, message)

    async def finish_run(
        self,
        context: LoopContext,
        result: ExecutionResult,
        *,
        changed: WorkspaceChanged | None = None,
        land: Lander | None = None,
    ) -> ExecutionResult:
        """Close the run: NO_OP, the closing event, landing, EXECUTION_LOOP_TERMINATED, status.

        ``changed`` tells whether the worktree differs from the conversation's base (NO_OP
        by content; None falls back to counting work tool calls). ``land`` commits a
        completed run; its refusal fails the run in the same final transition.
        """
        cid = context.conversation_id
        base = context.emit.started if isinstance(context.emit, RunSink) else None
        reason = result.termination_reason
        needs_view = reason is TerminationReason.COMPLETED and context.task.artifacts_expected
        was_changed = await changed() if changed is not None and needs_view else None
        # Without a view of the content, the log's own record of the turns is the evidence.
        logged = context.emit.turns if isinstance(context.emit, RunSink) else result.turns
        if is_no_op(
            context.task, reason, changed=was_changed, turns=logged, resumed=context.resumed
        ):
            result = result.model_copy(
                update={"termination_reason": TerminationReason.NO_OP, "error": NO_OP_MESSAGE}
            )
            await self._store.append(cid, ErrorEvent(message=NO_OP_MESSAGE, code="no_op"))
        elif reason is TerminationReason.COMPLETED and not _finished_logged(context):
            await self._store.append(cid, FinishedEvent(message=result.final_message))
        if result.termination_reason is TerminationReason.COMPLETED and land is not None:
            try:
                result = await land(result)
            except LandingRefused as refused:
                refusal = ErrorEvent(message=str(refused), code=refused.code, non_retryable=True)
                return await self._close(result, refusal=refusal, base=base)
        return await self._close(result, base=base)

    async def finish_unstarted(
        self,
        record: ConversationRecord,
        reason: TerminationReason,
        why: str,
        *,
        refusal: ErrorEvent | None = None,
    ) -> ExecutionResult:
        """Close a run whose loop never started: stopped during setup, or refused by the host.

        No turns, no NO_OP (nothing ran); the same log line and final transition as every run.
        """
        result = ExecutionResult(
            execution_id=record.execution_id or "none",
            conversation_id=record.id,
            loop_type=record.loop_type,
            termination_reason=reason,
            resumed=record.runs > 0,
        )
        return await self._close(result, refusal=refusal, why=why)

    async def _close(
        self,
        result: ExecutionResult,
        *,
        refusal: ErrorEvent | None = None,
        why: str | None = None,
        base: ConversationRecord | None = None,
    ) -> ExecutionResult:
        """The final transition of every run, with its log line; a refusal fails the run.

        The totals are ``base`` (the record as the run started; else the current record) plus
        the run's: the ledger's usage replaces the per-turn figures the store added live.
        """
        status = result.termination_reason.conversation_status()
        if refusal is not None:
            await self._store.append(result.conversation_id, refusal)
            result = result.model_copy(update={"error": refusal.message})
            status = ConversationStatus.FAILED
        log_termination(result)
        final = result

        def totals(record: ConversationRecord) -> dict[str, object]:
            start = base or record
            return {
                "usage": start.usage + final.usage,
                "turns": start.turns + len(final.turns),
                "error": final.error,
                "commit_sha": final.commit_sha or record.commit_sha,
            }

        await transition(
            self._store,
            result.conversation_id,
            status,
            why or result.error or result.final_message or result.termination_reason.value,
            clock=self._clock,
            termination_reason=result.termination_reason,
            update=totals,
        )
        return result

    async def _cut_short(
        self,
        loop: ExecutionLoop,
        context: LoopContext,
        reason: TerminationReason,
        error: str | None,
    ) -> ExecutionResult:
        """The result of a run the loop could not close itself; open actions are answered."""
        await self._close_dangling_actions(context, reason)
        # What the run spent is in the gateway's ledger (one execution per run), so the
        # conversation's totals stay true; the turns are those the sink saw.
        try:
            usage = await context.gateway.usage()
        except Exception:  # the ledger may be the thing that failed
            usage = TokenUsage()
        turns = context.emit.turns if isinstance(context.emit, RunSink) else []
        return build_result(
            context,
            loop_type=loop.get_loop_type(),
            reason=reason,
            turns=turns,
            usage=usage,
            error=error,
        )

    async def _close_dangling_actions(
        self, context: LoopContext, reason: TerminationReason
    ) -> None:
        """Give each action of this run without an observation one saying it was cut off.

        A resumed run then sees every tool call answered, and nobody mistakes the unknown
        effect of an interrupted tool for a success.
        """
        # Events before this run were answered when that run ended (or by reconciliation).
        after = context.prior_events[-1].seq if context.prior_events else 0
        # One rule for "which actions are open, and which never ran" (store.reconcile): an
        # action still awaiting approval was never executed, so its effect is known: none.
        for action in await open_actions(self._store, context.conversation_id, after=after):
            content = (
                f"the run was stopped ({reason.value}) while this action was awaiting "
                "approval; it never ran"
                if action.never_ran
                else f"the run was stopped ({reason.value}) while this tool was in progress; "
                "its effect is unknown"
            )
            await self._store.append(
                context.conversation_id,
                ObservationEvent(
                    action_id=action.action_id,
                    content=content,
                    is_error=True,
                    non_retryable=True,
                ),
            )


def _finished_logged(context: LoopContext) -> bool:
    return isinstance(context.emit, RunSink) and context.emit.finished_logged
