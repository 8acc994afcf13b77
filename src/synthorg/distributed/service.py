"""The run service of `synthorg serve` with ``engine = "temporal"``: runs are workflows.

The API server runs nothing itself. Creating a conversation is a workflow that only
prepares it (on a worker, which owns workspaces); starting a run starts the run workflow
(id = conversation id); pause / interrupt / steer / decide / cancel are the workflow's
control update, answered by the worker holding the run. Events, history and the live
stream come from the shared store as in the embedded mode, so a restarted server shows the
runs workers hold: it lists the open workflows at start and every few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, NoReturn

from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError, CancelledError, TemporalError
from temporalio.service import RPCError, RPCStatusCode

from synthorg.distributed.client import chosen, control, start_exclusive, start_run
from synthorg.distributed.config import DistributedConfig
from synthorg.distributed.names import DELETE_WORKFLOW, ROLLBACK_WORKFLOW, WORKFLOW
from synthorg.domain import ConversationRecord, ExecutionResult, Task, new_id
from synthorg.engine import EngineConfig
from synthorg.engine.control import Decision
from synthorg.errors import (
    BoundaryError,
    ConflictError,
    NotFoundError,
    UnavailableError,
    UsageError,
)
from synthorg.logging import get_logger
from synthorg.service.deletion import refuse_active
from synthorg.service.options import RunOptions
from synthorg.service.repositories import RepositoryRefused
from synthorg.store.protocol import ConversationStore

_log = get_logger("synthorg.distributed")

REFRESH_S = 2.0
"""How often the server lists the runs open in Temporal (runs another server started)."""
CREATE_S = 120.0
"""How long a create waits for a worker to prepare the conversation (none polling: 502)."""
CONTROL_UPDATE_S = 10.0
"""A control command the holder has not answered in this long finds it unreachable (frozen,
overloaded or cut off): a cancel falls back to Temporal cancellation, the others answer 503."""

_REFUSALS: dict[str, type[Exception]] = {
    "Usage": UsageError,
    "RepositoryRefused": RepositoryRefused,
    "NotOffered": NotFoundError,
    "NotFoundError": NotFoundError,
    "NotFound": NotFoundError,
    "Conflict": ConflictError,
}


class TemporalRunService:
    """RunService over Temporal; ``is_active`` is the set of run workflows seen open."""

    def __init__(
        self,
        client: Client,
        config: DistributedConfig,
        store: ConversationStore,
        *,
        engine: EngineConfig,
    ) -> None:
        self._client = client
        self._config = config
        self._store = store
        self._engine = engine
        self._watchers: dict[str, asyncio.Task[dict[str, Any] | None]] = {}
        self._refresher: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """See the runs already open (a restarted server), then keep looking."""
        await self._refresh()
        self._refresher = asyncio.create_task(self._refresh_forever(), name="temporal-refresh")

    # -- creation and start --------------------------------------------------------------
    async def create(self, task: Task, options: RunOptions) -> ConversationRecord:
        """A workflow that only prepares the conversation on a worker (not started). The worker
        applies the repository rule (its own config: its roots, its projects and mirrors)."""
        options, loop = chosen(task, options, self._engine)
        conversation_id = new_id("conv")
        handle = await start_run(
            self._client,
            self._config,
            conversation_id,
            task=task,
            options=options,
            labels=(task.project_id, loop),
            run=False,
        )
        await self._on_worker(handle, "created")
        return await self._store.get_conversation(conversation_id)

    async def _on_worker(self, handle: WorkflowHandle[Any, Any], what: str) -> None:
        """Wait for a workflow a worker runs for this server (bounded); the worker's
        refusal as the error the embedded service would raise."""
        try:
            async with asyncio.timeout(CREATE_S):
                await handle.result()
        except WorkflowFailureError as exc:
            _refused(exc, what)
        except TimeoutError:
            await handle.cancel()
            raise BoundaryError(
                f"no worker {what} conversation {handle.id} within {CREATE_S:g} s: is a "
                f"`synthorg worker` polling task queue {self._config.task_queue!r}? "
                "(`synthorg doctor` lists them)"
            ) from None

    async def start(self, conversation_id: str, *, message: str | None = None) -> None:
        """Start the run workflow; ConflictError while one is open."""
        if self.is_active(conversation_id):
            raise ConflictError(f"conversation {conversation_id} already has an active run")
        record = await self._store.get_conversation(conversation_id)
        try:
            handle = await start_run(
                self._client,
                self._config,
                conversation_id,
                message=message,
                labels=(record.task.project_id, record.loop_type),
            )
        except ConflictError:
            self._watch(conversation_id)  # open, started by someone else: it is active
            raise
        self._watch(conversation_id, handle)

    async def run(self, conversation_id: str, *, message: str | None = None) -> ExecutionResult:
        await self.start(conversation_id, message=message)
        result = await self.wait(conversation_id)
        if result is None:
            raise ConflictError(f"the run of {conversation_id} left no result")
        return result

    async def wait(self, conversation_id: str) -> ExecutionResult | None:
        """Until the open run workflow ends; its outcome as recorded by the worker."""
        watcher = self._watchers.get(conversation_id)
        if watcher is None:
            return None
        summary = await asyncio.shield(watcher)
        record = await self._store.get_conversation(conversation_id)
        if summary is None or record.execution_id is None or record.termination_reason is None:
            return None
        return ExecutionResult(
            execution_id=record.execution_id,
            conversation_id=conversation_id,
            loop_type=record.loop_type,
            termination_reason=record.termination_reason,
            error=record.error,
            commit_sha=summary.get("commit_sha"),
            branch=summary.get("branch"),
            resumed=bool(summary.get("resumed")),
        )

    def is_active(self, conversation_id: str) -> bool:
        """Whether this server has seen the conversation's run workflow open (and not end)."""
        return conversation_id in self._watchers

    # -- control: the workflow's update, answered by the holding worker ------------------
    async def steer(self, conversation_id: str, text: str) -> None:
        await self._control(conversation_id, {"action": "steer", "text": text})

    async def pause(self, conversation_id: str, *, by: str) -> None:
        await self._control(conversation_id, {"action": "pause", "by": by})

    async def interrupt(self, conversation_id: str, *, by: str) -> None:
        await self._control(conversation_id, {"action": "interrupt", "by": by})

    async def cancel(self, conversation_id: str, *, by: str) -> None:
        """The holder stops the run (sandbox included) and records who cancelled; a holder
        that does not answer (dead, or no run claimed yet) gets Temporal's cancellation."""
        try:
            await self._control(conversation_id, {"action": "cancel", "by": by})
        except HolderUnreachable:
            _log.warning("CANCEL_BY_TEMPORAL", conversation_id=conversation_id, by=by)
            await self._client.get_workflow_handle(conversation_id).cancel()

    async def decide(self, conversation_id: str, decision: Decision) -> None:
        await self._control(
            conversation_id,
            {
                "action": "decide",
                "accepted": sorted(decision.accepted),
                "rejected": sorted(decision.rejected),
                "by": decision.approver,
                "reason": decision.reason,
            },
        )

    async def _control(self, conversation_id: str, command: dict[str, Any]) -> str:
        """The holder's answer to ``command``; HolderUnreachable when none comes in time
        (Temporal's update call would otherwise wait for a frozen holder, then fail)."""
        bound = asyncio.timeout(CONTROL_UPDATE_S)
        try:
            async with bound:
                return await control(self._client, conversation_id, command)
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as exc:
            # The SDK turns the bound's cancellation of the update into its own error, which
            # the bound then lets through: a TimeoutError never arrives alone. The same error
            # without the bound expiring is Temporal's own deadline: no holder answered either.
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # our caller is being cancelled: not an answer to give
            raise HolderUnreachable(conversation_id, str(command["action"])) from exc
        except RPCError as exc:
            # No worker completes the run's workflow tasks (its holder, frozen, had them):
            # Temporal refuses the update at once ("Workflow Task in failed state").
            if exc.status is not RPCStatusCode.FAILED_PRECONDITION:
                raise
            raise HolderUnreachable(conversation_id, str(command["action"])) from exc

    # -- rollback and delete: the embedded service's own, on a worker ----------------------
    async def rollback(self, conversation_id: str, n: int, *, by: str) -> None:
        """On a worker (a remote project's worktree is made there from the remote); its
        workflow has the conversation's id, so it is refused (409) while a run is open."""
        await self._exclusive(ROLLBACK_WORKFLOW, conversation_id, {"n": n, "by": by}, "rolled back")

    async def delete(self, conversation_id: str, *, delete_branch: bool = False) -> None:
        """On a worker, with the embedded rules (``LocalRunService.delete``); refused here
        first while a run is open, as the embedded service refuses it."""
        record = await self._store.get_conversation(conversation_id)
        refuse_active(record, active=self.is_active(conversation_id))
        args = {"delete_branch": delete_branch}
        await self._exclusive(DELETE_WORKFLOW, conversation_id, args, "deleted")

    async def _exclusive(
        self, workflow: str, conversation_id: str, args: dict[str, Any], what: str
    ) -> None:
        if self.is_active(conversation_id):
            raise ConflictError(f"conversation {conversation_id} has an active run")
        handle = await start_exclusive(self._client, self._config, workflow, args, conversation_id)
        await self._on_worker(handle, what)

    async def shutdown(self) -> None:
        """Stop watching; the runs go on on their workers."""
        tasks = [t for t in (self._refresher, *self._watchers.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._watchers.clear()

    # -- what is open ---------------------------------------------------------------------
    def _watch(self, conversation_id: str, handle: WorkflowHandle[Any, Any] | None = None) -> None:
        if conversation_id in self._watchers:
            return
        handle = handle or self._client.get_workflow_handle(conversation_id)
        task = asyncio.create_task(_outcome(handle), name=f"watch-{conversation_id}")
        self._watchers[conversation_id] = task
        task.add_done_callback(lambda _: self._ended(conversation_id, task))

    def _ended(self, conversation_id: str, task: asyncio.Task[Any]) -> None:
        if self._watchers.get(conversation_id) is task:
            del self._watchers[conversation_id]

    async def _refresh(self) -> None:
        query = (
            f'WorkflowType="{WORKFLOW}" AND ExecutionStatus="Running" '
            f'AND TaskQueue="{self._config.task_queue}"'
        )
        async for execution in self._client.list_workflows(query):
            self._watch(execution.id)

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                await self._refresh()
            except (RPCError, RuntimeError) as exc:  # Temporal restarting: try again later
                _log.warning("TEMPORAL_LIST_FAILED", error=str(exc))


async def _outcome(handle: WorkflowHandle[Any, Any]) -> dict[str, Any] | None:
    """The workflow's result once it ends; None when it failed, was cancelled or is gone."""
    try:
        result: dict[str, Any] = await handle.result()
    except (WorkflowFailureError, RPCError, TemporalError):
        return None
    return result


class HolderUnreachable(UnavailableError):
    """The worker holding the run did not answer a control command in time (503)."""

    def __init__(self, conversation_id: str, action: str) -> None:
        super().__init__(
            f"the worker holding the run of conversation {conversation_id} is unreachable: it "
            f"did not answer within {CONTROL_UPDATE_S:g} s (frozen, overloaded or cut off), so "
            f"the {action} is not confirmed. It still takes effect if that worker answers soon; "
            "if the worker is gone, Temporal moves the run to another worker after its "
            "heartbeat timeout. Check the conversation's status and send it again."
        )


def _refused(exc: WorkflowFailureError, what: str) -> NoReturn:
    """The worker's refusal as the error the embedded service would raise (the innermost
    known one: a RepositoryRefused arrives wrapped in the activity's Usage error)."""
    known: Exception | None = None
    cause: BaseException | None = exc.cause
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type in _REFUSALS:
            known = _REFUSALS[cause.type](cause.message)
        cause = cause.__cause__
    if known is not None:
        raise known from exc
    if isinstance(exc.cause, CancelledError):
        raise ConflictError(f"cancelled before the conversation was {what}") from exc
    raise ConflictError(f"the conversation could not be {what}: {exc.cause or exc}") from exc
