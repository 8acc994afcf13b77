"""An in-test RunService: the real LoopRunner, RunControl, worktrees and store, a scripted loop.

Until ``synthorg.service.runs`` lands this drives the routes. Its loop runs a real shell
command per turn in the worktree, emits real events through the runner's sink, waits for
confirmation through RunControl and honours pause, interrupt, cancel and shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from synthorg.domain import (
    ActionEvent,
    AgentIdentity,
    ConfirmationDecisionEvent,
    ConfirmationRequestEvent,
    ConversationRecord,
    ConversationStatus,
    ExecutionResult,
    FinishedEvent,
    InterruptEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    PendingAction,
    RiskLevel,
    StatusChangeEvent,
    Task,
    TerminationReason,
    TokenUsage,
    new_id,
)
from synthorg.engine.checkers import RunCheckers, flag_checker
from synthorg.engine.control import Decision, RunControl
from synthorg.engine.protocol import GatewayAccess, LoopContext
from synthorg.engine.runner import LoopRunner
from synthorg.errors import ConflictError
from synthorg.service.options import RunOptions
from synthorg.store.protocol import ConversationStore
from synthorg.workspace.worktrees import WorktreeManager


async def _no_usage() -> TokenUsage:
    return TokenUsage()


class ScriptedLoop:
    """``turns`` turns, each one action running ``echo <n> >> progress.txt`` for real."""

    def __init__(self, store: ConversationStore, turns: int, delay: float) -> None:
        self.store = store
        self.turns = turns
        self.delay = delay

    def get_loop_type(self) -> str:
        return "react"

    async def _set_status(self, context: LoopContext, status: ConversationStatus) -> None:
        record = await self.store.get_conversation(context.conversation_id)
        await self.store.append(
            context.conversation_id, StatusChangeEvent(old=record.status, new=status)
        )
        await self.store.save_conversation(
            record.model_copy(update={"status": status, "updated_at": datetime.now(UTC)})
        )

    def _result(
        self, context: LoopContext, reason: TerminationReason, calls: int
    ) -> ExecutionResult:
        return ExecutionResult(
            execution_id=context.execution_id,
            conversation_id=context.conversation_id,
            loop_type="react",
            termination_reason=reason,
            tool_calls=calls,
            branch=context.workspace.branch,
            final_message="done" if reason is TerminationReason.COMPLETED else "",
        )

    async def execute(self, context: LoopContext) -> ExecutionResult:
        calls = 0
        for turn in range(self.turns):
            for text in context.control.drain_steering():
                if await context.emit(MessageEvent(role="user", text=text)):
                    return self._result(context, TerminationReason.PAUSED, calls)
            await asyncio.sleep(self.delay)  # the "model call"
            action_id = new_id("act")
            action = ActionEvent(
                kind="action",
                action_id=action_id,
                tool_name="terminal",
                arguments={"command": f"echo {turn} >> progress.txt"},
                summary=f"append {turn} to progress.txt",
                risk=RiskLevel.HIGH,
                usage=TokenUsage(tokens_in=10, tokens_out=5),
            )
            stop = await context.emit(action)
            if stop is not None:
                return self._result(context, stop, calls)
            if context.confirmation_policy.requires_confirmation(action.risk, action.tool_name):
                await context.emit(
                    ConfirmationRequestEvent(
                        pending=(
                            PendingAction(
                                action_id=action_id,
                                tool_name="terminal",
                                summary=action.summary,
                                risk=action.risk,
                            ),
                        )
                    )
                )
                await self._set_status(context, ConversationStatus.WAITING_CONFIRMATION)
                decision = await context.control.wait_for_decision(frozenset({action_id}))
                await context.emit(
                    ConfirmationDecisionEvent(
                        accepted=tuple(sorted(decision.accepted)),
                        rejected=tuple(sorted(decision.rejected)),
                        reason=decision.reason,
                        approver=decision.approver,
                    )
                )
                await self._set_status(context, ConversationStatus.RUNNING)
                if action_id in decision.rejected:
                    await context.emit(
                        ObservationEvent(
                            action_id=action_id,
                            content="rejected: " + decision.reason,
                            is_error=True,
                        )
                    )
                    continue
            proc = await asyncio.create_subprocess_shell(
                f"echo {turn} >> progress.txt",
                cwd=context.workspace.path,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await proc.communicate()
            calls += 1
            stop = await context.emit(
                ObservationEvent(
                    action_id=action_id, content=out.decode(), exit_code=proc.returncode
                )
            )
            if stop is not None:
                return self._result(context, stop, calls)
        await context.emit(FinishedEvent(message="done"))
        return self._result(context, TerminationReason.COMPLETED, calls)


@dataclass
class _Run:
    task: asyncio.Task[ExecutionResult]
    control: RunControl
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    interrupted: asyncio.Event = field(default_factory=asyncio.Event)


class ScriptedRunService:
    """RunService over the real runner with the scripted loop."""

    def __init__(
        self, store: ConversationStore, home: Path, *, turns: int = 3, delay: float = 0.05
    ) -> None:
        self.store = store
        self.worktrees = WorktreeManager(home)
        self.turns = turns
        self.delay = delay
        self.runner = LoopRunner(store)
        self._runs: dict[str, _Run] = {}
        self._shutdown = asyncio.Event()

    async def create(self, task: Task, options: RunOptions) -> ConversationRecord:
        cid = new_id("conv")
        ws = await self.worktrees.create(
            Path(task.repository), cid, base_ref=options.base_ref, enabled=options.worktree
        )
        now = datetime.now(UTC)
        record = ConversationRecord(
            id=cid,
            task=task,
            agent=AgentIdentity(id="agent-test"),
            loop_type=options.loop or "react",
            model=options.model or "scripted",
            provider="scripted",
            created_at=now,
            updated_at=now,
            workspace=ws.info(),
            max_turns=options.max_turns or 30,
            budget_usd=options.budget_usd,
            confirmation_policy=options.confirmation_policy,
        )
        await self.store.create_conversation(record)
        await self.store.append(cid, StatusChangeEvent(old=None, new=ConversationStatus.CREATED))
        return record

    async def start(self, conversation_id: str, *, message: str | None = None) -> None:
        if conversation_id in self._runs:
            raise ConflictError(f"conversation {conversation_id} already has an active run")
        control = RunControl()
        run = _Run(task=None, control=control)  # type: ignore[arg-type]
        # Claim the slot before the first await: a concurrent start must see it.
        self._runs[conversation_id] = run
        try:
            record = await self.store.get_conversation(conversation_id)
        except BaseException:
            del self._runs[conversation_id]
            raise
        assert record.workspace is not None
        if message is not None:
            await self.store.append(conversation_id, MessageEvent(role="user", text=message))
        checkers = RunCheckers(
            task_cancellation=flag_checker(run.cancelled), shutdown=flag_checker(self._shutdown)
        )
        context = LoopContext(
            task=record.task,
            agent=record.agent,
            conversation_id=conversation_id,
            execution_id=new_id("exec"),
            model=record.model,
            provider=record.provider,
            workspace=record.workspace,
            gateway=GatewayAccess(base_url="http://127.0.0.1:1", bearer="unused", usage=_no_usage),
            emit=self.runner.sink(conversation_id, checkers, control),
            control=control,
            max_turns=record.max_turns,
            confirmation_policy=record.confirmation_policy,
            resumed=record.runs > 0,
        )
        loop = ScriptedLoop(self.store, self.turns, self.delay)
        run.task = asyncio.create_task(
            self.runner.run(loop, context, requested_stop=lambda: self._reason(run))
        )
        run.task.add_done_callback(lambda _t: self._runs.pop(conversation_id, None))
        # The runner persists RUNNING first; wait for it so callers see a consistent status.
        for _ in range(200):
            if (await self.store.get_conversation(conversation_id)).status is not record.status:
                break
            if run.task.done():
                break
            await asyncio.sleep(0.005)

    def _reason(self, run: _Run) -> TerminationReason:
        if run.cancelled.is_set():
            return TerminationReason.CANCELLED
        if self._shutdown.is_set():
            return TerminationReason.SHUTDOWN
        return TerminationReason.PAUSED

    async def run(self, conversation_id: str, *, message: str | None = None) -> ExecutionResult:
        await self.start(conversation_id, message=message)
        result = await self.wait(conversation_id)
        assert result is not None
        return result

    async def wait(self, conversation_id: str) -> ExecutionResult | None:
        run = self._runs.get(conversation_id)
        if run is None:
            return None
        with contextlib.suppress(asyncio.CancelledError):
            return await asyncio.shield(run.task)
        return None

    def is_active(self, conversation_id: str) -> bool:
        return conversation_id in self._runs

    def _active(self, conversation_id: str) -> _Run:
        run = self._runs.get(conversation_id)
        if run is None:
            raise ConflictError(f"conversation {conversation_id} has no active run")
        return run

    async def steer(self, conversation_id: str, text: str) -> None:
        self._active(conversation_id).control.steer(text)

    async def pause(self, conversation_id: str, *, by: str) -> None:
        run = self._active(conversation_id)
        await self.store.append(conversation_id, PauseEvent(requested_by=by))
        run.control.request_pause()

    async def _stop(self, run: _Run) -> None:
        run.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run.task

    async def interrupt(self, conversation_id: str, *, by: str) -> None:
        run = self._active(conversation_id)
        await self.store.append(conversation_id, InterruptEvent(requested_by=by))
        run.interrupted.set()
        await self._stop(run)

    async def cancel(self, conversation_id: str, *, by: str) -> None:
        run = self._active(conversation_id)
        run.cancelled.set()
        await self._stop(run)

    async def decide(self, conversation_id: str, decision: Decision) -> None:
        self._active(conversation_id).control.decide(decision)

    async def delete(self, conversation_id: str, *, delete_branch: bool = False) -> None:
        if conversation_id in self._runs:
            raise ConflictError(f"conversation {conversation_id} is running")
        record = await self.store.get_conversation(conversation_id)
        ws = await self.worktrees.get(conversation_id)
        if ws is not None:
            await self.worktrees.remove(ws, delete_branch=delete_branch)
        await self.store.delete_conversation(record.id)

    async def shutdown(self) -> None:
        self._shutdown.set()
        for run in list(self._runs.values()):
            run.interrupted.set()
            await self._stop(run)
