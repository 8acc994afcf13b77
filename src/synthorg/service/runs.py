"""The local run service: conversations' runs in this process, from start to end.

Creation is ``service/creation.py``; ownership ``ownership.py``; landing ``landing.py``;
which control applies ``control.py``, the control itself ``live.py``; rollback and delete
``rollback.py`` and ``deletion.py`` (under ``exclusive.py``'s claim); the run's lifecycle
itself is ``engine/runner.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from synthorg import overlaylog
from synthorg.domain import (
    ConversationRecord,
    ErrorEvent,
    ExecutionResult,
    MessageEvent,
    Task,
    TerminationReason,
    TokenUsage,
    new_id,
)
from synthorg.domain.binding import RunBinding
from synthorg.engine import (
    Decision,
    EngineConfig,
    GatewayAccess,
    LoopContext,
    LoopRegistry,
    LoopRunner,
    RunCheckers,
    budget_checker,
    flag_checker,
)
from synthorg.engine.bearers import BearerMinter
from synthorg.engine.lifecycle import events_after
from synthorg.errors import ConflictError
from synthorg.faultpoints import pause_point
from synthorg.gateway.service import Gateway
from synthorg.hostwork import HostWorkExceeded
from synthorg.service.active import ActiveRun, ActiveRuns
from synthorg.service.bearers import GatewayMinter
from synthorg.service.config import HostWorkSettings, RunDefaults
from synthorg.service.creation import ConversationCreator
from synthorg.service.deletion import Deletion
from synthorg.service.exclusive import claimed
from synthorg.service.hostbound import bound_host_work
from synthorg.service.landing import LandingScan, land, workspace_changed
from synthorg.service.live import LiveControl
from synthorg.service.options import RunOptions
from synthorg.service.ownership import OwnershipPolicy, claim_run
from synthorg.service.provisioning import LoopProvisioner, RunSetup
from synthorg.service.repositories import RepositoryPolicy
from synthorg.service.rollback import Rollback
from synthorg.service.takeover import supersede
from synthorg.service.tree import committed_spend, ledger_usage
from synthorg.store.protocol import Store
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.errors import GateRefusedError
from synthorg.workspace.gate import CommitGate
from synthorg.workspace.worktrees import WorktreeManager


class LocalRunService:
    """Runs conversations in this process; one active run per conversation.

    Construct with the store, the gateway service, the worktree manager, the commit gate,
    the loop registry and a provisioner; ``synthorg.service.boot`` wires them from settings.
    """

    def __init__(
        self,
        *,
        store: Store,
        gateway: Gateway,
        worktrees: WorktreeManager,
        gate: CommitGate,
        registry: LoopRegistry,
        provision: LoopProvisioner,
        engine: EngineConfig,
        defaults: RunDefaults,
        isolation_warnings: Sequence[str] = (),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        repositories: RepositoryPolicy | None = None,
        ownership: OwnershipPolicy | None = None,
        checkpoints: CheckpointStore | None = None,
        settle_dead: Callable[[Path], int] | None = None,
        host_work: HostWorkSettings | None = None,
    ) -> None:
        self.store = store
        self.checkpoints = checkpoints or CheckpointStore()
        self.gateway = gateway
        self.worktrees = worktrees
        self.gate = gate
        self.registry = registry
        self._provision = provision
        self._defaults = defaults
        self._isolation_warnings = tuple(isolation_warnings)
        self._clock = clock
        self.repositories = repositories or RepositoryPolicy(home=worktrees.home)
        self._runner = LoopRunner(store, clock=clock)
        self._minter: BearerMinter = GatewayMinter(gateway)
        self._runs = ActiveRuns()
        self._shutdown = asyncio.Event()
        self._creator = ConversationCreator(
            store=store,
            gateway=gateway,
            worktrees=worktrees,
            registry=registry,
            provision=provision,
            engine=engine,
            defaults=defaults,
            repositories=self.repositories,
            clock=clock,
        )
        # Workers (several processes, one store): a taken-over run's writes are refused
        # (store.fence); its model calls too, as the claim kills its execution.
        self._ownership = ownership or OwnershipPolicy()
        # What dead owners' sandboxes left (a quota image not yet copied back): settled at
        # takeover, before the run (or its gate) judges the worktree.
        self._settle_dead = settle_dead
        # What a run's host-side children (git on its worktree, mkfs, rsync) may use.
        self._host_work = host_work or HostWorkSettings()
        self._live = LiveControl(store, self._runs)
        claim = partial(claimed, store, self._runs, lease_s=self._ownership.lease_s)
        self._rollback = Rollback(
            store=store,
            worktrees=worktrees,
            checkpoints=self.checkpoints,
            repositories=self.repositories,
            claim=claim,
        )
        self._delete = Deletion(
            store=store, worktrees=worktrees, is_active=self.is_active, claim=claim
        )

    # -- creation -------------------------------------------------------------------------
    async def create(
        self,
        task: Task,
        options: RunOptions,
        *,
        conversation_id: str | None = None,
        repositories: RepositoryPolicy | None = None,
    ) -> ConversationRecord:
        """Persist a new conversation with its worktree (not started). ``repositories``: the
        caller's rule when it is not this process's (the local operator's)."""
        return await self._creator.create(
            task, options, conversation_id=conversation_id, repositories=repositories
        )

    # -- runs -------------------------------------------------------------------------------
    def is_active(self, conversation_id: str) -> bool:
        """Whether a run of this conversation is in progress in this process."""
        return self._runs.is_active(conversation_id)

    async def start(
        self,
        conversation_id: str,
        *,
        message: str | None = None,
        repositories: RepositoryPolicy | None = None,
        admit: Callable[[ConversationRecord], None] | None = None,
    ) -> None:
        """Start (or continue) a run in the background; ConflictError if one is active.
        ``repositories``: the caller's rule when it is not this process's. ``admit`` sees the
        record once the conversation is claimed and may refuse by raising (an engine's retry
        of a run that ended meanwhile: checked before the claim it could have changed)."""
        if self._shutdown.is_set():
            raise ConflictError("the service is shutting down; no new runs")
        # Claim the conversation before the first await: concurrent starts must not both pass.
        active = self._runs.claim(conversation_id)
        active.repositories = repositories
        ownership = None
        try:
            fence = self._ownership.fence
            previous = await self.store.conversation_owner(conversation_id) if fence else None
            # Across processes: one live owner (refused naming it; a dead one is reconciled).
            ownership = await claim_run(
                self.store, conversation_id, lease_s=self._ownership.lease_s, fence=fence
            )
            # The claim killed the previous run's execution if it was still open (a dead or
            # taken-over owner's: store.reconcile), so its bearer is refused from now on.
            record = await self.store.get_conversation(conversation_id)
            if admit is not None:
                admit(record)
            if fence:
                active.fence = ownership.owner.owner_id
                # Before this run's sandbox sees the worktree: the superseded one is stopped.
                await supersede(record, previous, settle=self._settle_dead)
            # Resume: the rule (the caller's) holds now too.
            (repositories or self.repositories).check(record.task.repository)
            if message:
                await self.store.append(conversation_id, MessageEvent(role="user", text=message))
        except BaseException:
            self._runs.end(conversation_id, active)
            if ownership is not None:
                await asyncio.shield(ownership.release())
            raise
        active.task = asyncio.create_task(
            ownership.hold(self._run(record, active)), name=f"run-{conversation_id}"
        )

    async def run(self, conversation_id: str, *, message: str | None = None) -> ExecutionResult:
        """Start a run and wait for its end (commit gate included)."""
        await self.start(conversation_id, message=message)
        result = await self.wait(conversation_id)
        assert result is not None
        return result

    async def wait(self, conversation_id: str) -> ExecutionResult | None:
        """Wait for the active (or just ended) run; None when none was started here."""
        task = self._runs.task_of(conversation_id)
        if task is None:
            return None
        return await asyncio.shield(task)

    async def _run(self, record: ConversationRecord, active: ActiveRun) -> ExecutionResult:
        try:
            with bound_host_work(self._host_work, record.id):
                return await self._run_inner(record, active)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if active.stop_requested is None or active.runner_started or task is None:
                raise
            # Stopped while setting up (worktree, sandbox): the runner never saw the run.
            task.uncancel()
            return await asyncio.shield(
                self._runner.finish_unstarted(
                    record, active.stop_requested, "stopped before the run started"
                )
            )
        finally:
            self._runs.end(record.id, active)

    async def end_unstarted(
        self, record: ConversationRecord, reason: TerminationReason, why: str
    ) -> ExecutionResult:
        """End a conversation that never ran (a delegated child whose parent stopped first)
        through the runner's one close, as every run ends."""
        return await self._runner.finish_unstarted(record, reason, why)

    async def _run_inner(self, record: ConversationRecord, active: ActiveRun) -> ExecutionResult:
        try:
            policy = active.repositories or self.repositories
            workspace = await self.worktrees.resume(
                policy.check(record.task.repository), record.id, record.workspace
            )
        except (GateRefusedError, HostWorkExceeded) as exc:  # not the recorded one: run nothing
            refusal = ErrorEvent(message=str(exc), code=exc.code, non_retryable=True)
            return await self._runner.finish_unstarted(
                record, TerminationReason.ERROR, f"refused: {exc}", refusal=refusal
            )
        execution_id = new_id("exec")
        # The budget is the conversation's: a resumed run gets what its earlier runs, and the
        # children they delegated, left (the ledger's figures and its outstanding holds: a run
        # the host died in never reported its own). Its own usage alone is what its record
        # continues from, read after the grant billed the holds whose lease ran out.
        spent = await committed_spend(self.store, record.id)
        prior_usage = await ledger_usage(self.store, record.id)
        binding = RunBinding.of(record, execution_id, spent=spent)
        bearer = await self._minter.open(binding)
        if self._isolation_warnings:
            # Said in the run's own log, not only in the server's: whoever watches sees it.
            await self.store.append(
                record.id,
                MessageEvent(
                    role="system",
                    text="WARNING: the sandbox is weaker than declared: "
                    + "; ".join(self._isolation_warnings),
                ),
            )
        if not workspace.is_worktree or workspace.restored_from is not None:
            # No worktree (asked for explicitly: no checkpoints, no commit), or one restored
            # from a remote checkpoint: said in the run's own log, the agent reads it too.
            await self.store.append(record.id, MessageEvent(role="system", text=workspace.note))
        prior = await events_after(self.store, record.id)
        resumed = record.runs > 0
        setup = RunSetup(
            record=record, workspace=workspace, execution_id=execution_id, bearer=bearer
        )

        async def usage() -> TokenUsage:
            row = await self.gateway.usage(execution_id)
            return TokenUsage(
                tokens_in=row.tokens_in, tokens_out=row.tokens_out, cost_usd=row.cost_usd
            )

        checkers = RunCheckers(
            task_cancellation=flag_checker(active.cancelled),
            shutdown=flag_checker(self._shutdown),
            budget=budget_checker(usage, binding.cost_ceiling),
        )
        # A landing takes an overlay's record of what changed only from this run's own.
        overlaylog.forget(workspace.path)
        try:
            async with self._provision(setup) as (deps, endpoints):
                await pause_point("sandbox-started")
                loop = self.registry.build(record.loop_type, deps)
                context = LoopContext(
                    task=record.task,
                    agent=record.agent,
                    conversation_id=record.id,
                    execution_id=execution_id,
                    model=record.model,
                    provider=record.provider,
                    workspace=workspace.info(),
                    gateway=GatewayAccess(
                        base_url=endpoints.gateway_base_url,
                        bearer=bearer,
                        usage=usage,
                        mcp_base_url=endpoints.mcp_base_url,
                    ),
                    emit=self._runner.sink(record.id, checkers, active.control),
                    control=active.control,
                    max_turns=record.max_turns,
                    budget_usd=record.budget_usd,
                    prior_usage=prior_usage,
                    confirmation_policy=record.confirmation_policy,
                    resumed=resumed,
                    prior_events=prior,
                )
                active.runner_started = True
                result = await self._runner.execute(
                    loop, context, requested_stop=lambda: active.stop_requested
                )
                active.closing = True  # a stop from now on would only lose the result
                await pause_point("run-closing")
        finally:
            await asyncio.shield(self._minter.close(execution_id, "run ended"))
        # After the sandbox is gone: nothing in it can change the worktree under the gate, so
        # the NO_OP check's scan is the one the gate lands.
        scan = LandingScan()
        return await asyncio.shield(
            self._runner.finish_run(
                context,
                result,
                changed=partial(workspace_changed, workspace, scan, self.gate.limits),
                land=partial(land, self.gate, record, workspace, scan=scan),
            )
        )

    # -- control (service.live) ---------------------------------------------------------
    def active_run(self, conversation_id: str) -> ActiveRun | None:
        """The run of this conversation in progress here (delegation cascades through it)."""
        return self._live.active_run(conversation_id)

    async def steer(self, conversation_id: str, text: str) -> None:
        """A message for the next turn of the active run."""
        await self._live.steer(conversation_id, text)

    async def pause(self, conversation_id: str, *, by: str) -> None:
        """Stop after the in-flight model call; resumable."""
        await self._live.pause(conversation_id, by=by)

    async def interrupt(self, conversation_id: str, *, by: str) -> None:
        """Stop now; the conversation stays resumable (PAUSED)."""
        await self._live.interrupt(conversation_id, by=by)

    async def cancel(self, conversation_id: str, *, by: str) -> None:
        """Stop now; the conversation ends CANCELLED."""
        await self._live.cancel(conversation_id, by=by)

    async def hand_over(self, conversation_id: str) -> None:
        """Stop the run here without ending it (SHUTDOWN): another process resumes it from
        the log (``LiveControl.hand_over``)."""
        await self._live.hand_over(conversation_id)

    async def decide(self, conversation_id: str, decision: Decision) -> None:
        """Deliver a decision bound to pending action ids and the approver."""
        await self._live.decide(conversation_id, decision)

    # -- rollback and delete (service.rollback, service.deletion) -------------------------
    async def rollback(self, conversation_id: str, n: int, *, by: str) -> None:
        """Restore the worktree to checkpoint ``n``; refused while a run is active."""
        await self._rollback(conversation_id, n, by=by)

    async def delete(self, conversation_id: str, *, delete_branch: bool = False) -> None:
        """Remove the conversation, its events and its worktree, and with a root its whole
        delegation tree; refused while any of them is active. The ledger keeps their rows."""
        await self._delete(conversation_id, delete_branch=delete_branch)

    async def shutdown(self) -> None:
        """Stop every active run with SHUTDOWN (resumable)."""
        self._shutdown.set()
        running = self._runs.running()
        if not running:
            return
        tasks = {a.task for a in running if a.task is not None}
        _, pending = await asyncio.wait(tasks, timeout=self._defaults.shutdown_grace_s)
        for active in running:
            if active.task in pending:
                await self._live.stop(active, TerminationReason.SHUTDOWN)
