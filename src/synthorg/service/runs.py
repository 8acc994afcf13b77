"""The local run service: conversations' runs in this process, their live control and end.

Creation is ``service/creation.py``; ownership ``ownership.py``; landing ``landing.py``;
which control applies ``control.py``; the run's lifecycle itself is ``engine/runner.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from synthorg.domain import (
    CancelEvent,
    CheckpointEvent,
    ConversationRecord,
    ErrorEvent,
    ExecutionResult,
    InterruptEvent,
    MessageEvent,
    PauseEvent,
    Task,
    TerminationReason,
    TokenUsage,
    new_id,
)
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
from synthorg.engine.bearers import BearerMinter, RunGrant
from synthorg.engine.lifecycle import events_after
from synthorg.errors import ConflictError, NotFoundError
from synthorg.faultpoints import pause_point
from synthorg.gateway.service import Gateway
from synthorg.logging import get_logger
from synthorg.service.active import ActiveRun, ActiveRuns
from synthorg.service.bearers import GatewayMinter
from synthorg.service.config import RunDefaults
from synthorg.service.creation import ConversationCreator
from synthorg.service.deletion import refuse_active
from synthorg.service.landing import LandingScan, land, workspace_changed
from synthorg.service.options import RunOptions
from synthorg.service.ownership import OwnershipPolicy, claim_run
from synthorg.service.provisioning import LoopProvisioner, RunSetup
from synthorg.service.repositories import RepositoryPolicy
from synthorg.service.takeover import supersede
from synthorg.service.tree import committed_spend, ledger_usage, members, run_tree
from synthorg.store.errors import ConversationOwnedError, LeaseLostError
from synthorg.store.fence import fenced
from synthorg.store.protocol import Store
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.errors import GateRefusedError
from synthorg.workspace.gate import CommitGate
from synthorg.workspace.models import Workspace
from synthorg.workspace.remote import project_name
from synthorg.workspace.worktrees import WorktreeManager, recorded_workspace

_log = get_logger("synthorg.service")


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
        except GateRefusedError as exc:  # a worktree that is not the recorded one: run nothing
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
        grant = RunGrant.of(record, execution_id, spent=spent)
        bearer = await self._minter.open(grant)
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
            budget=budget_checker(usage, grant.cost_ceiling),
        )
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

    # -- control ------------------------------------------------------------------------------
    def active_run(self, conversation_id: str) -> ActiveRun | None:
        """The run of this conversation in progress here (delegation cascades through it)."""
        return (
            None
            if not self._runs.is_active(conversation_id)
            else self._runs.require(conversation_id)
        )

    def _require_active(self, conversation_id: str) -> ActiveRun:
        return self._runs.require(conversation_id)

    async def steer(self, conversation_id: str, text: str) -> None:
        """A message for the next turn of the active run."""
        active = self._require_active(conversation_id)
        await self.store.append(conversation_id, MessageEvent(role="user", text=text))
        active.control.steer(text)

    async def pause(self, conversation_id: str, *, by: str) -> None:
        """Stop after the in-flight model call; resumable."""
        active = self._require_active(conversation_id)
        await self.store.append(conversation_id, PauseEvent(requested_by=by))
        active.control.request_pause()

    async def interrupt(self, conversation_id: str, *, by: str) -> None:
        """Stop now; the conversation stays resumable (PAUSED)."""
        active = self._require_active(conversation_id)
        await self.store.append(conversation_id, InterruptEvent(requested_by=by))
        await self._cancel(active, TerminationReason.PAUSED)

    async def cancel(self, conversation_id: str, *, by: str) -> None:
        """Stop now; the conversation ends CANCELLED."""
        active = self._require_active(conversation_id)
        _log.info("RUN_CANCEL_REQUESTED", conversation_id=conversation_id, by=by)
        await self.store.append(conversation_id, CancelEvent(requested_by=by))
        active.cancelled.set()
        await self._cancel(active, TerminationReason.CANCELLED)

    async def hand_over(self, conversation_id: str) -> None:
        """Stop the run here without ending it (SHUTDOWN, as at a worker's stop): another
        process resumes it from the log. For a run an engine has moved elsewhere.

        Said in the log first, inside the run's fence: a process that no longer owns the run
        (a zombie) is refused there (LeaseLostError) and only stops its own run and sandbox;
        the successor's log and run go on undisturbed.
        """
        active = self._require_active(conversation_id)
        try:
            with fenced(active.fence) if active.fence else contextlib.nullcontext():
                await self.store.append(
                    conversation_id,
                    MessageEvent(
                        role="system",
                        text="this worker stopped the run: the engine moved it to another "
                        "worker; it resumes there from this log",
                    ),
                )
        except LeaseLostError:
            _log.warning("RUN_HAND_OVER_FENCED", conversation_id=conversation_id)
        await self._cancel(active, TerminationReason.SHUTDOWN)

    async def _cancel(self, active: ActiveRun, reason: TerminationReason) -> None:
        active.stop_requested = reason
        if active.task is None or active.task.done():
            return
        if not active.closing:  # a closing run ends as its loop did; it is only waited for
            active.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({active.task})

    async def decide(self, conversation_id: str, decision: Decision) -> None:
        """Deliver a decision bound to pending action ids and the approver."""
        active = self._require_active(conversation_id)
        # ConflictError for ids not pending; the loop records the decision event itself.
        active.control.decide(decision)

    async def rollback(self, conversation_id: str, n: int, *, by: str) -> None:
        """Restore the worktree to checkpoint ``n``; refused while a run is active.

        The conversation is claimed like a run (here and across processes) for the duration,
        so no run can start on a half-restored worktree; the host-recorded worktree is
        checked on disk before any git runs (``open_git``), never its own ``.git``.
        """
        async with self._claimed(conversation_id):
            record = await self.store.get_conversation(conversation_id)
            ws = await self._worktree_here(record)
            await self.checkpoints.rollback(ws, n, conversation_id)  # 404 for unknown n
            _log.info("CHECKPOINT_ROLLBACK", conversation_id=conversation_id, n=n, by=by)
            await self.store.append(
                conversation_id,
                MessageEvent(
                    role="system",
                    text=f"{by} rolled the worktree back to checkpoint {n}",
                ),
            )
            mirrors = self.worktrees.mirrors
            if mirrors is not None and mirrors.project_of_workspace(ws) is not None:
                # A travelling worktree resumes from the remote's newest checkpoint: the
                # restored state becomes it, or a resume elsewhere would undo the rollback.
                cp = await self.checkpoints.create(ws, conversation_id)
                await self.store.append(
                    conversation_id, CheckpointEvent(index=cp.index, ref=cp.ref)
                )

    async def _worktree_here(self, record: ConversationRecord) -> Workspace:
        """The conversation's worktree in this process: the recorded one, or for a project
        with a remote the one any worker makes from the remote's newest checkpoint."""
        info = record.workspace
        if info is None or not info.is_worktree:
            raise ConflictError(f"conversation {record.id} has no worktree, so no checkpoints")
        if project_name(record.task.repository) is not None:
            repo = self.repositories.check(record.task.repository)  # this process's mirror
            return await self.worktrees.resume(repo, record.id, info)
        ws = recorded_workspace(Path(info.path), record.id)
        if ws is None:
            raise ConflictError(f"the worktree of {record.id} no longer exists")
        return ws

    async def delete(self, conversation_id: str, *, delete_branch: bool = False) -> None:
        """Remove the conversation, its events and its worktree, and with a root its whole
        delegation tree; refused while any of them is active. The ledger keeps their rows.

        Every member is claimed like a run (here and across processes) before its status is
        read, so no run can start in a conversation being deleted."""
        record = await self.store.get_conversation(conversation_id)
        refuse_active(record, active=self.is_active(conversation_id))
        await self._refuse_tree_member(record)
        root = record.root_id is None or record.root_id == record.id
        tree = await run_tree(self.store, record.id)
        doomed = members(tree) if root else [tree]
        async with contextlib.AsyncExitStack() as claims:
            for member in doomed:
                await claims.enter_async_context(self._claimed(member.id))
                # Read under the claim: no run can have started since.
                refuse_active(await self.store.get_conversation(member.id), active=False)
            for member in doomed:
                workspace = await self.worktrees.get(member.id)
                if workspace is not None:
                    await self.worktrees.remove(workspace, delete_branch=delete_branch)
                await self._forget_remotely(member.id, delete_branch=delete_branch)
            await self.store.delete_conversation(conversation_id)

    @contextlib.asynccontextmanager
    async def _claimed(self, conversation_id: str) -> AsyncIterator[None]:
        """Hold the conversation as a run would, so no run starts in it meanwhile: in this
        process (ConflictError while one is active) and across processes (refused while a
        live process owns it; a dead owner's leftovers are reconciled first)."""
        try:
            active = self._runs.claim(conversation_id)
        except ConflictError:
            raise ConflictError(
                f"conversation {conversation_id} is running; cancel it first"
            ) from None
        try:
            try:
                ownership = await claim_run(
                    self.store, conversation_id, lease_s=self._ownership.lease_s
                )
            except ConversationOwnedError as owned:
                raise ConflictError(
                    f"conversation {conversation_id} is held by another process "
                    f"({owned.holder.describe()}); wait for it to let go or stop its run"
                ) from None
            async with ownership.held():
                yield
        finally:
            self._runs.end(conversation_id, active)

    async def _forget_remotely(self, conversation_id: str, *, delete_branch: bool) -> None:
        """A project's remote loses a deleted conversation's refs (``Mirrors.forget``), before
        its record goes: a remote that cannot be reached fails the delete, which is retried."""
        record = await self.store.get_conversation(conversation_id)
        project = project_name(record.task.repository)
        mirrors = self.worktrees.mirrors
        if project is None:
            return
        if mirrors is None or project not in mirrors.projects:
            _log.warning("REMOTE_REFS_KEPT", conversation_id=conversation_id, project=project)
            return
        await mirrors.forget(project, conversation_id, delete_branch=delete_branch)

    async def _refuse_tree_member(self, record: ConversationRecord) -> None:
        """A delegated child that ran goes only with its root: its ledger rows stay, but the
        tree's one budget counts them through the child's row (its ``root_id``), so the root
        could spend them again. One that never ran (a delegation undone at spawn) has none."""
        if record.root_id is None or record.root_id == record.id:
            return
        if not await self.store.executions_of(record.id):
            return
        try:
            await self.store.get_conversation(record.root_id)
        except NotFoundError:
            return  # the tree is gone: nothing left to spend its budget
        raise ConflictError(
            f"conversation {record.id} was delegated in the tree of {record.root_id}; its spend "
            "counts against that tree's budget, so it is deleted only once its root is"
        )

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
                await self._cancel(active, TerminationReason.SHUTDOWN)
