"""Delegation: a run's sub-tasks as child conversations, budgeted, run in parallel, merged back.

Each child is an ordinary conversation of the run service (its own id, worktree, event log and
bearer), created with ``parent_id``/``root_id`` and branched from the parent's latest
checkpoint. Its cost ceiling is carved out of the parent's remaining budget and the parent's
own ceiling at the gateway is lowered by the same amount while the children run, then set to
what the children left. When they end the host merges their commits into the parent's worktree
in the order the model gave (``synthorg.workspace.merge``); the model never mediates it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from synthorg.domain import (
    ConversationRecord,
    ConversationStatus,
    ExecutionResult,
    Task,
    TerminationReason,
    new_id,
)
from synthorg.domain.money import ZERO, remaining, total
from synthorg.engine.catalogue import SUBTASK_LOOP_TYPES
from synthorg.engine.native.tools import ToolResult
from synthorg.engine.native.tools.delegate import Delegator, SubTask
from synthorg.errors import ConflictError, SynthOrgError
from synthorg.gateway.service import Gateway
from synthorg.logging import get_logger
from synthorg.service.options import RunOptions
from synthorg.service.provisioning import RunSetup
from synthorg.service.tree import committed_spend, run_tree
from synthorg.service.tree import ledger_spend as ledger_spend  # re-exported (tests)
from synthorg.store.protocol import Store
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.merge import ChildCommit, MergeOutcome, merge_children

if TYPE_CHECKING:
    from synthorg.service.runs import LocalRunService

_log = get_logger("synthorg.delegation")
_CENT = Decimal("0.000001")
_KEY_LABEL = "delegation_key"
_INDEX_LABEL = "delegation_index"


class DelegationSettings(BaseModel):
    """The ``[delegation]`` section: whether native runs may delegate, and how far."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=True, description="Offer the delegate tool to native loops.")
    max_depth: int = Field(
        default=2, ge=1, le=8, description="Generations below a root (1: only roots delegate)."
    )
    max_children: int = Field(default=8, ge=1, le=32, description="Sub-tasks per delegate call.")
    max_concurrent: int = Field(
        default=4, ge=1, le=32, description="Children of one call running at once."
    )


class DelegationHub:
    """Links run provisioning to the run service (built before it, bound after)."""

    def __init__(
        self,
        settings: DelegationSettings,
        *,
        store: Store,
        gateway: Gateway,
        checkpoints: CheckpointStore,
    ) -> None:
        self.settings = settings
        self.store = store
        self.gateway = gateway
        self.checkpoints = checkpoints
        self._service: LocalRunService | None = None

    def bind(self, service: LocalRunService) -> None:
        """The service children are created and run by."""
        self._service = service

    @property
    def service(self) -> LocalRunService:
        if self._service is None:
            raise SynthOrgError("delegation used before the run service was bound")
        return self._service

    def for_run(self, setup: RunSetup) -> Delegator | None:
        """The delegator of one run; None when delegation is off or the run has no git."""
        if not self.settings.enabled or not setup.workspace.is_git:
            return None
        return RunDelegator(self, setup)


class _Refused(Exception):  # control flow: a refusal observation
    pass


@dataclass
class _Child:
    record: ConversationRecord
    index: int
    ceiling: Decimal | None
    result: ExecutionResult | None = None
    failure: str | None = None
    spent: Decimal = Decimal(0)
    """What it and its own children spent, from the ledger."""
    committed: Decimal = Decimal(0)
    """That and what their runs still hold (``committed_spend``): what the parent pays."""
    prior: Decimal = Decimal(0)
    """What was committed before this delegate call."""


class RunDelegator:
    """Delegation for one run of a parent conversation."""

    def __init__(self, hub: DelegationHub, setup: RunSetup) -> None:
        self._hub = hub
        self._setup = setup
        self._spent: dict[str, Decimal] = {}

    def spent(self) -> Decimal:
        return total(self._spent.values())

    async def delegate(self, tasks: Sequence[SubTask]) -> ToolResult:
        parent = await self._hub.store.get_conversation(self._setup.record.id)
        try:
            await self._check_limits(parent, tasks)
            for task in tasks:
                _check_loop(task, parent)
            key = _delegation_key(parent.id, tasks)
            # Children this very call made before the host died are continued, never made
            # twice; any it had not made yet (a crash mid-spawn) are made now.
            children = await self._existing(parent.id, key)
            have = {c.index for c in children}
            missing = [i for i in range(1, len(tasks) + 1) if i not in have]
            if missing:
                children += await self._spawn(parent, tasks, key, missing)
            children.sort(key=lambda c: c.index)
        except _Refused as refusal:
            return ToolResult(content=f"delegation refused: {refusal}", is_error=True)
        execution_id = self._setup.execution_id
        # What children made before (an earlier run, or the same call earlier in this run)
        # already spent is already out of this run's ceiling: only new spend comes off it.
        for child in children:
            child.prior = await committed_spend(self._hub.store, child.record.id)
        before = (await self._hub.gateway.usage(execution_id)).cost_ceiling_usd
        carved = total(c.ceiling or ZERO for c in children)
        if before is not None:
            await self._hub.gateway.set_ceiling(execution_id, remaining(before, carved))
        try:
            await self._run_all(parent.id, children)
        finally:
            # Whatever happened: the parent's ceiling is what it had minus what children spent.
            await asyncio.shield(self._settle(children, before))
        outcome = await self._merge(children)
        return ToolResult(
            content=_observation(children, outcome, await self._left()),
            is_error=not outcome.clean,
        )

    # -- limits -----------------------------------------------------------------------------
    async def _check_limits(self, parent: ConversationRecord, tasks: Sequence[SubTask]) -> None:
        settings = self._hub.settings
        if len(tasks) > settings.max_children:
            raise _Refused(
                f"{len(tasks)} sub-tasks asked, at most {settings.max_children} per call; "
                "group them or do some yourself"
            )
        depth = 0
        node = parent
        while node.parent_id is not None:
            depth += 1
            node = await self._hub.store.get_conversation(node.parent_id)
        if depth + 1 > settings.max_depth:
            raise _Refused(
                f"this conversation is {depth} level(s) below its root and delegation is "
                f"limited to {settings.max_depth}; do the work yourself"
            )

    # -- spawning ---------------------------------------------------------------------------
    async def _existing(self, parent_id: str, key: str) -> list[_Child]:
        """Children of this very delegation made before a crash: resumed, never made twice."""
        children = await self._hub.store.list_children(parent_id)
        found: dict[int, ConversationRecord] = {}
        for child in children:
            index = child.labels.get(_INDEX_LABEL, "")
            if child.labels.get(_KEY_LABEL) == key and index.isdigit():
                found.setdefault(int(index), child)
        return [_Child(record=c, index=i, ceiling=c.budget_usd) for i, c in sorted(found.items())]

    async def _spawn(
        self,
        parent: ConversationRecord,
        tasks: Sequence[SubTask],
        key: str,
        indices: Sequence[int],
    ) -> list[_Child]:
        """Create the children ``indices`` (1-based) of ``tasks``: all of them, or none."""
        chosen = [tasks[i - 1] for i in indices]
        ceilings = await self._carve(chosen)
        base = await self._base()
        children: list[_Child] = []
        try:
            for index, task, ceiling in zip(indices, chosen, ceilings, strict=True):
                children.append(await self._create(parent, task, index, ceiling, base, key))
        except BaseException:
            # No partial delegation: what was made is removed (worktree and branch too).
            await asyncio.shield(self._remove([c.record.id for c in children]))
            raise
        return children

    async def _remove(self, child_ids: list[str]) -> None:
        for child_id in child_ids:
            with contextlib.suppress(SynthOrgError):
                await self._hub.service.delete(child_id, delete_branch=True)

    async def _create(
        self,
        parent: ConversationRecord,
        task: SubTask,
        index: int,
        ceiling: Decimal | None,
        base: str,
        key: str,
    ) -> _Child:
        service = self._hub.service
        prompt = task.prompt
        if task.paths:
            prompt += "\n\nPaths you are expected to touch: " + ", ".join(task.paths[:50])
        child_task = Task(
            id=new_id("task"),
            project_id=parent.task.project_id,
            prompt=prompt,
            complexity=parent.task.complexity,
            repository=parent.task.repository,
        )
        try:
            options = RunOptions(
                loop=task.loop or parent.loop_type,
                model=task.model or parent.model,
                provider=None if task.model else parent.provider,
                max_turns=parent.max_turns,
                budget_usd=ceiling,
                confirmation_policy=parent.confirmation_policy,
                base_ref=base,
            )
            record = await service.create(child_task, options)
        except (ValidationError, SynthOrgError) as exc:
            raise _Refused(f"sub-task {index} cannot run: {exc}") from exc
        record = record.model_copy(
            update={
                "parent_id": parent.id,
                "root_id": parent.root_id or parent.id,
                "labels": {
                    **record.labels,
                    _KEY_LABEL: key,
                    _INDEX_LABEL: str(index),
                },
            }
        )
        await self._hub.store.save_conversation(record)
        _log.info(
            "DELEGATION_CHILD_CREATED",
            parent_id=parent.id,
            child_id=record.id,
            index=index,
            ceiling=str(ceiling),
            base=base,
        )
        return _Child(record=record, index=index, ceiling=ceiling)

    async def _carve(self, tasks: Sequence[SubTask]) -> list[Decimal | None]:
        """Each child's ceiling: its share of what the parent has left now."""
        row = await self._hub.gateway.usage(self._setup.execution_id)
        ceiling = row.cost_ceiling_usd
        if ceiling is None:
            return [None] * len(tasks)
        left = remaining(ceiling, row.cost_usd)
        assert left is not None
        # Summed exactly: in floating point 1.0 + 1e-16 is 1.0, and the carves overran.
        shares = [None if t.budget_share is None else Decimal(str(t.budget_share)) for t in tasks]
        asked = sum((s for s in shares if s is not None), Decimal(0))
        if asked > 1:
            raise _Refused(f"budget shares add up to {asked:f}, more than 1 (all you have left)")
        unasked = shares.count(None)
        rest = (1 - asked) / unasked if unasked else Decimal(0)
        out: list[Decimal | None] = []
        for index, given in enumerate(shares, start=1):
            share = given if given is not None else rest
            child = (left * share).quantize(_CENT, rounding=ROUND_DOWN)
            if child <= 0:
                raise _Refused(
                    f"sub-task {index} would get no budget (${left:.6f} left of your "
                    f"${ceiling} ceiling)"
                )
            out.append(child)
        return out

    async def _base(self) -> str:
        """The parent's latest checkpoint (the tool's own, taken just before it ran)."""
        ws = self._setup.workspace
        found = await self._hub.checkpoints.list(ws)
        checkpoint = found[-1] if found else await self._hub.checkpoints.create(ws)
        return checkpoint.sha

    # -- running ----------------------------------------------------------------------------
    async def _run_all(self, parent_id: str, children: list[_Child]) -> None:
        service = self._hub.service
        limit = asyncio.Semaphore(self._hub.settings.max_concurrent)

        async def one(child: _Child) -> None:
            async with limit:
                try:
                    current = await self._hub.store.get_conversation(child.record.id)
                    if not _finished(current):  # new, or resumed after the host died
                        child.result = await service.run(child.record.id)
                except ConflictError as exc:
                    child.failure = f"could not start: {exc}"
                except SynthOrgError as exc:
                    child.failure = f"{type(exc).__name__}: {exc}"
                child.record = await self._hub.store.get_conversation(child.record.id)

        try:
            async with asyncio.TaskGroup() as group:
                watcher = group.create_task(self._cascade_pause(parent_id, children))

                async def runners() -> None:
                    try:
                        async with asyncio.TaskGroup() as inner:
                            for child in children:
                                inner.create_task(one(child))
                    finally:
                        watcher.cancel()  # the children ended: nothing left to pause

                group.create_task(runners())
        except BaseException:
            await asyncio.shield(self._cascade_stop(parent_id, children))
            raise

    async def _cascade_pause(self, parent_id: str, children: list[_Child]) -> None:
        """A pause asked of the parent is asked of every live child."""
        active = self._hub.service.active_run(parent_id)
        if active is None:
            return
        queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        active.control.forwarders.append(queue)
        try:
            while True:
                command = await queue.get()
                if command.get("type") != "pause":
                    continue
                for child in children:
                    with contextlib.suppress(ConflictError):
                        await self._hub.service.pause(child.record.id, by=f"parent {parent_id}")
        finally:
            active.control.forwarders.remove(queue)

    async def _cascade_stop(self, parent_id: str, children: list[_Child]) -> None:
        """The parent's delegate call ended abnormally: stop its live children the same way.

        Interrupted parent: children interrupted (resumable). Shutdown: nothing, the service
        stops every run itself and a resume continues them. Anything else (cancelled, or the
        call failed): children cancelled, so none outlives the call that owns it.
        """
        service = self._hub.service
        active = service.active_run(parent_id)
        reason = active.stop_requested if active is not None else None
        if reason is TerminationReason.SHUTDOWN:
            return
        for child in children:
            with contextlib.suppress(ConflictError):
                if reason is TerminationReason.PAUSED:
                    await service.interrupt(child.record.id, by=f"parent {parent_id}")
                else:
                    await service.cancel(child.record.id, by=f"parent {parent_id}")
            if reason is not TerminationReason.PAUSED:
                await self._cancel_unstarted(child.record.id, parent_id)
        _log.info(
            "DELEGATION_CASCADED",
            parent_id=parent_id,
            reason=reason.value if reason is not None else "failed",
        )

    async def _cancel_unstarted(self, child_id: str, parent_id: str) -> None:
        """A child still waiting for its turn (never started) ends CANCELLED with its parent;
        an interrupted parent's waiting children stay CREATED, for the resume to start."""
        record = await self._hub.store.get_conversation(child_id)
        if record.status is ConversationStatus.CREATED and not self._hub.service.is_active(
            child_id
        ):
            await self._hub.service.end_unstarted(
                record,
                TerminationReason.CANCELLED,
                f"parent {parent_id} stopped before this child started",
            )

    async def _settle(self, children: list[_Child], before: Decimal | None) -> None:
        for child in children:
            record = await self._hub.store.get_conversation(child.record.id)
            if record.execution_id is not None:
                tree = await run_tree(self._hub.store, record.id)
                child.spent = tree.tree_cost_usd
                child.committed = await committed_spend(self._hub.store, record.id, tree)
            self._spent[record.id] = child.spent
        if before is not None:
            # Measured as the parent's grant measured it: a dead run's hold counted in both.
            spent = total(c.committed - c.prior for c in children)
            await self._hub.gateway.set_ceiling(self._setup.execution_id, remaining(before, spent))

    async def _left(self) -> Decimal | None:
        row = await self._hub.gateway.usage(self._setup.execution_id)
        return remaining(row.cost_ceiling_usd, row.cost_usd)

    # -- merging ----------------------------------------------------------------------------
    async def _merge(self, children: list[_Child]) -> MergeOutcome:
        commits = [
            ChildCommit(label=c.record.id, sha=c.record.commit_sha)
            for c in children
            if c.failure is None
            and c.record.status is ConversationStatus.FINISHED
            and c.record.termination_reason is TerminationReason.COMPLETED
            and c.record.commit_sha
        ]
        outcome = await merge_children(self._setup.workspace, commits, self._hub.checkpoints)
        _log.info(
            "DELEGATION_MERGED",
            parent_id=self._setup.record.id,
            merged=list(outcome.merged),
            conflict_with=outcome.conflict_with,
        )
        return outcome


def _delegation_key(parent_id: str, tasks: Sequence[SubTask]) -> str:
    """The same delegate call of the same parent (a resume re-issues it) has the same key."""
    body = json.dumps([t.model_dump() for t in tasks], sort_keys=True)
    return hashlib.sha256(f"{parent_id}\0{body}".encode()).hexdigest()[:24]


def _check_loop(task: SubTask, parent: ConversationRecord) -> None:
    loop = task.loop or parent.loop_type
    if loop not in SUBTASK_LOOP_TYPES:
        raise _Refused(
            f"sub-tasks cannot run the {loop} loop (only a native loop runs in a child's own "
            f"workspace; see docs/architecture.md); use {', '.join(sorted(SUBTASK_LOOP_TYPES))}"
        )


def _finished(record: ConversationRecord) -> bool:
    return record.status.is_ended


def _observation(children: list[_Child], outcome: MergeOutcome, left: Decimal | None) -> str:
    lines = [f"delegated {len(children)} sub-task(s); merged by the host in this order:"]
    for child in children:
        record = child.record
        ceiling = f" of ${child.ceiling}" if child.ceiling is not None else ""
        if child.failure is not None:
            lines.append(f"{child.index}. {record.id}: {child.failure}; spent ${child.spent}")
            continue
        reason = record.termination_reason.value if record.termination_reason else "not run"
        merged = (
            "merged"
            if record.id in outcome.merged
            else ("CONFLICT" if outcome.conflict_with == record.id else "not merged")
        )
        commit = f", commit {record.commit_sha[:12]}" if record.commit_sha else ", no commit"
        lines.append(
            f"{child.index}. {record.id} [{record.loop_type}]: {reason}{commit}; spent "
            f"${child.spent}{ceiling}; {merged}"
        )
        if record.error:
            lines.append(f"   error: {record.error[:300]}")
        if child.result is not None and child.result.final_message:
            lines.append(f"   said: {child.result.final_message[:300]}")
    if outcome.clean:
        lines.append(
            "merge: clean; your workspace now holds the merged changes"
            if outcome.merged
            else "merge: nothing to merge; your workspace is unchanged"
        )
    else:
        lines.append(
            f"merge: CONFLICT merging {outcome.conflict_with}; nothing was merged and your "
            "workspace is unchanged. Conflicting files (your side incl. earlier children, then "
            "the child's):"
        )
        for conflict in outcome.conflicts:
            lines.append(f"--- {conflict.path} (yours):\n{conflict.ours}")
            lines.append(f"+++ {conflict.path} ({outcome.conflict_with}):\n{conflict.theirs}")
        branches = ", ".join(f"synthorg/{c.record.id}" for c in children if c.record.commit_sha)
        lines.append(f"The children's work stays on their branches: {branches}")
    spent = total(c.spent for c in children)
    lines.append(
        f"spend: children ${spent} in total"
        + (f"; you have ${left:.6f} left" if left is not None else "")
    )
    return "\n".join(lines)
