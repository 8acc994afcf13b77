"""The activities a worker runs: each one calls the same run service the embedded mode uses.

The run lifecycle is not forked: ``run_loop`` is ``LocalRunService.start`` + ``wait`` (claim
with reconciliation of a dead owner, the loop, the commit gate in ``finish_run``), held while
it heartbeats the conversation's last durable seq to Temporal.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from synthorg.distributed.names import (
    APPLY_CONTROL,
    CONFIRM_LANDING,
    DELETE,
    HELD_BY,
    PREPARE_WORKSPACE,
    ROLLBACK,
    RUN_LOOP,
)
from synthorg.domain import (
    ConversationRecord,
    ConversationStatus,
    ExecutionResult,
    Task,
    TerminationReason,
)
from synthorg.engine import Decision
from synthorg.errors import ConflictError, NotFoundError, UsageError
from synthorg.faultpoints import pause_point
from synthorg.logging import get_logger
from synthorg.service.boot import Components
from synthorg.service.options import RunOptions
from synthorg.store.errors import LeaseLostError
from synthorg.workspace.git import run_git_sync
from synthorg.workspace.remote import project_name

_log = get_logger("synthorg.distributed")

_RETRY_ELSEWHERE = frozenset({TerminationReason.SHUTDOWN})
"""Ends that mean "this worker stopped", not "the run ended": Temporal retries them."""


class RunActivities:
    """The activities of one worker process, bound to its booted components."""

    def __init__(
        self, components: Components, client: Client, own_queue: str, heartbeat_s: float
    ) -> None:
        self._components = components
        self._client = client
        self._own_queue = own_queue
        self._beat_s = heartbeat_s / 4  # the SDK throttles sends to 0.8 x the timeout

    @activity.defn(name=PREPARE_WORKSPACE)
    async def prepare_workspace(self, conversation_id: str, create: dict[str, Any]) -> str:
        """Create the conversation (its worktree, its record) under the workflow's id."""
        store = self._components.store
        with contextlib.suppress(NotFoundError):
            await store.get_conversation(conversation_id)
            return conversation_id  # an earlier attempt created it
        try:
            task = Task.model_validate(create["task"])
            options = RunOptions.model_validate(create["options"])
            record = await self._beating(
                self._components.service.create(task, options, conversation_id=conversation_id)
            )
        except (UsageError, ValueError) as exc:
            raise ApplicationError(str(exc), type="Usage", non_retryable=True) from exc
        return record.id

    async def _beating[T](self, work: Awaitable[T]) -> T:
        """``work``'s result, heartbeating meanwhile (a killed worker's attempt is retried
        after the heartbeat timeout, not after the activity's whole start-to-close bound)."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                activity.heartbeat()
                done, _ = await asyncio.wait({task}, timeout=self._beat_s)
                if done:
                    return task.result()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    @activity.defn(name=RUN_LOOP)
    async def run_loop(self, conversation_id: str, message: str | None) -> dict[str, Any]:
        """Run (or resume) the conversation here until it ends; heartbeat its last seq."""
        service = self._components.service
        store = self._components.store
        info = activity.info()
        retry = bool(info.heartbeat_details)
        if retry:
            message = None  # an earlier attempt started the run: its message is in the log
            ended = _ended(await store.get_conversation(conversation_id))
            if ended is not None:
                return ended  # its result was lost with its worker: never run it again
            await pause_point("run-retry-checked")
        await self._client.get_workflow_handle(conversation_id).signal(HELD_BY, self._own_queue)
        _log.info(
            "DISTRIBUTED_RUN_ATTEMPT",
            conversation_id=conversation_id,
            attempt=info.attempt,
            queue=self._own_queue,
        )
        try:
            # Checked again once claimed: the earlier attempt may have ended the run (and let
            # the conversation go) since the check above.
            await service.start(
                conversation_id, message=message, admit=_refuse_ended if retry else None
            )
        except _EndedMeanwhile as ended_meanwhile:
            return ended_meanwhile.outcome
        except NotFoundError as exc:
            raise ApplicationError(str(exc), type="NotFound", non_retryable=True) from exc
        waiting = asyncio.ensure_future(service.wait(conversation_id))
        try:
            while True:
                activity.heartbeat(await store.last_seq(conversation_id))
                done, _ = await asyncio.wait({waiting}, timeout=self._beat_s)
                if done:
                    break
        except asyncio.CancelledError:
            # Temporal cancellation (or this worker stopping): stop the run, sandbox included.
            details = activity.cancellation_details()
            if not activity.is_worker_shutdown():
                with contextlib.suppress(ConflictError):
                    if details is not None and details.cancel_requested:
                        await service.cancel(conversation_id, by="temporal")
                    else:
                        # Timed out (a heartbeat missed on a busy worker) or gone: Temporal
                        # moved the run on. Stop it here resumable, never as the run's end.
                        await service.hand_over(conversation_id)
            with contextlib.suppress(BaseException):
                await waiting
            _let_go(conversation_id, "cancelled")
            raise
        try:
            result = waiting.result()
        except LeaseLostError as exc:
            _let_go(conversation_id, "lease lost")
            raise ApplicationError(str(exc), type="LeaseLost") from exc
        assert result is not None
        if result.termination_reason in _RETRY_ELSEWHERE:
            raise ApplicationError(
                f"worker stopped the run ({result.termination_reason.value}); resume elsewhere",
                type="WorkerStopped",
            )
        return _summary(result)

    @activity.defn(name=CONFIRM_LANDING)
    async def confirm_landing(self, conversation_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """The run's outcome as recorded, and that a landed commit is on the run's branch."""
        await pause_point("confirm-landing")
        record = await self._components.store.get_conversation(conversation_id)
        sha = record.commit_sha if result.get("termination_reason") == "completed" else None
        on_branch = False
        if sha and record.workspace is not None and record.workspace.branch:
            ref = f"refs/heads/{record.workspace.branch}"
            project = project_name(record.task.repository)
            if project is not None:
                # Maybe not the worker that landed it: asked of the project's remote.
                mirrors = self._components.service.worktrees.mirrors
                on_branch = mirrors is not None and await mirrors.landed(
                    project, conversation_id, sha
                )
                where = f"project {project}'s remote"
            else:
                found = await asyncio.to_thread(
                    run_git_sync,
                    ["merge-base", "--is-ancestor", sha, ref],
                    Path(record.task.repository),
                    check=False,
                )
                on_branch = found.returncode == 0
                where = record.task.repository
            if not on_branch:
                raise ApplicationError(
                    f"commit {sha} is not on {ref} of {where}",
                    type="LandingLost",
                    non_retryable=True,
                )
        return {**result, "status": record.status.value, "commit_on_branch": on_branch}

    @activity.defn(name=APPLY_CONTROL)
    async def apply_control(self, command: dict[str, Any]) -> str:
        """A control command for a run this worker holds (the same calls the server makes)."""
        service = self._components.service
        conversation_id = str(command["conversation_id"])
        by = str(command.get("by") or "temporal")
        action = command["action"]
        with _refusals():
            if action == "steer":
                await service.steer(conversation_id, str(command["text"]))
            elif action == "pause":
                await service.pause(conversation_id, by=by)
            elif action == "interrupt":
                await service.interrupt(conversation_id, by=by)
            elif action == "cancel":
                await service.cancel(conversation_id, by=by)
            elif action == "decide":
                await service.decide(
                    conversation_id,
                    Decision(
                        accepted=frozenset(map(str, command.get("accepted", ()))),
                        rejected=frozenset(map(str, command.get("rejected", ()))),
                        approver=by,
                        reason=str(command.get("reason", "")),
                    ),
                )
            else:
                raise ApplicationError(f"unknown action {action!r}", non_retryable=True)
        return (await self._components.store.get_conversation(conversation_id)).status.value

    @activity.defn(name=ROLLBACK)
    async def rollback_workspace(self, conversation_id: str, n: int, by: str) -> None:
        """The embedded rollback, here: a travelling worktree is made on this worker from the
        remote's newest checkpoint first, and the restored state published as the newest."""
        with _refusals():
            await self._components.service.rollback(conversation_id, n, by=by)

    @activity.defn(name=DELETE)
    async def delete_conversation(self, conversation_id: str, delete_branch: bool) -> None:
        """The embedded delete, here (its rules: 409 while active, a root takes its tree, the
        ledger keeps its rows); a project's remote loses the conversation's refs."""
        try:
            with _refusals():
                await self._components.service.delete(conversation_id, delete_branch=delete_branch)
        except ApplicationError as exc:
            if exc.type != "NotFound" or activity.info().attempt == 1:
                raise
            # An earlier attempt deleted it and died before saying so: done.


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The service's refusals as failures no retry changes; the API server maps their type
    back to the same 404 / 409 / 400 the embedded service gives."""
    try:
        yield
    except NotFoundError as exc:
        raise ApplicationError(str(exc), type="NotFound", non_retryable=True) from exc
    except ConflictError as exc:
        raise ApplicationError(str(exc), type="Conflict", non_retryable=True) from exc
    except UsageError as exc:
        raise ApplicationError(str(exc), type="Usage", non_retryable=True) from exc


class _EndedMeanwhile(Exception):
    """A retry found the run ended by an earlier attempt: its outcome, nothing run."""

    def __init__(self, outcome: dict[str, Any]) -> None:
        super().__init__("the run ended in an earlier attempt")
        self.outcome = outcome


def _refuse_ended(record: ConversationRecord) -> None:
    outcome = _ended(record)
    if outcome is not None:
        raise _EndedMeanwhile(outcome)


def _ended(record: ConversationRecord) -> dict[str, Any] | None:
    """The outcome of a run an earlier attempt started and that ended by itself (finished,
    failed, paused, cancelled); None when it must be resumed (a dead or stopped worker)."""
    reason = record.termination_reason
    if (
        record.status.is_active
        or record.status is ConversationStatus.INTERRUPTED
        or reason is None
        or reason in _RETRY_ELSEWHERE
    ):
        return None
    return {
        "termination_reason": reason.value,
        "commit_sha": record.commit_sha,
        "branch": record.workspace.branch if record.workspace else None,
        "error": record.error,
        "resumed": True,
    }


def _let_go(conversation_id: str, why: str) -> None:
    """This attempt let the run go (Temporal moved it on, or another owner holds it)."""
    _log.warning("DISTRIBUTED_RUN_LET_GO", conversation_id=conversation_id, why=why)


def _summary(result: ExecutionResult) -> dict[str, Any]:
    return {
        "termination_reason": result.termination_reason.value,
        "commit_sha": result.commit_sha,
        "branch": result.branch,
        "error": result.error,
        "resumed": result.resumed,
    }
