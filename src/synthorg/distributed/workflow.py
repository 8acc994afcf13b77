"""The run workflow: prepare the workspace, run the loop, confirm the landing. No I/O here.

Deterministic by construction: it only schedules activities by name and keeps which worker
queue holds the run (for control commands); everything that touches the store, git or a
sandbox is an activity. Temporal's workflow sandbox imports this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.workflow import ActivityCancellationType

from synthorg.distributed.attributes import STATUS
from synthorg.distributed.names import (
    APPLY_CONTROL,
    CONFIRM_LANDING,
    CONTROL,
    CREATE_WORKFLOW,
    DELETE,
    DELETE_WORKFLOW,
    HELD_BY,
    PREPARE_WORKSPACE,
    ROLLBACK,
    ROLLBACK_WORKFLOW,
    RUN_LOOP,
    WORKFLOW,
)

_SHORT = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
# A refused repository, a loop or model this worker does not offer: retrying cannot help.
_PREPARE = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_attempts=5,
    non_retryable_error_types=["Usage", "RepositoryRefused", "NotOffered", "NotFoundError"],
)
# A rollback or delete: transient failures (a remote not answering) are retried on any worker.
_MAINTAIN = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_attempts=5,
    non_retryable_error_types=["NotFound", "Conflict", "Usage"],
)
# Reading the outcome back: retried on any worker (one cut off from the store fails, another
# answers) until the bound; a commit not on the branch is a non-retryable LandingLost.
_CONFIRM = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
)
# A dead worker's run is retried elsewhere; a run that keeps killing workers gives up.
_LOOP_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=20,
    # A conversation still owned elsewhere (a frozen owner's lease) is retried until free.
    non_retryable_error_types=["NotFound", "Usage"],
)


_CONFIRM_ANYWHERE = "confirm-landing-on-any-worker"
"""The patch id of confirm_landing as a normal activity (was a local one)."""


@workflow.defn(name=WORKFLOW)
class RunWorkflow:
    """One run of one conversation (workflow id = conversation id)."""

    def __init__(self) -> None:
        self._holder: str | None = None

    @workflow.run
    async def run(self, start: dict[str, Any]) -> dict[str, Any]:
        """Prepare (when ``create``), run, land; the status attribute follows along."""
        return await _tracked(self._run(start))

    async def _run(self, start: dict[str, Any]) -> dict[str, Any]:
        conversation_id = workflow.info().workflow_id
        heartbeat = timedelta(seconds=float(start["heartbeat_s"]))
        if start.get("create") is not None:
            await _prepare(conversation_id, start["create"], heartbeat)
        _status("running")
        result: dict[str, Any] = await workflow.execute_activity(
            RUN_LOOP,
            args=[conversation_id, start.get("message")],
            start_to_close_timeout=timedelta(days=7),
            heartbeat_timeout=heartbeat,
            retry_policy=_LOOP_RETRY,
            # Cancel waits for the worker to stop the run: no sandbox outlives it.
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        if not workflow.patched(_CONFIRM_ANYWHERE):
            # Histories from before: replayed as they ran (a local activity).
            old: dict[str, Any] = await workflow.execute_local_activity(
                CONFIRM_LANDING,
                args=[conversation_id, result],
                start_to_close_timeout=timedelta(minutes=2),
                retry_policy=_SHORT,
            )
            return old
        # A normal activity, not a local one: a local activity runs on the worker holding
        # the workflow task, which may be the very worker cut off from the store, and its
        # retries stay there. This one goes to any worker of the queue, attempt by attempt.
        landed: dict[str, Any] = await workflow.execute_activity(
            CONFIRM_LANDING,
            args=[conversation_id, result],
            start_to_close_timeout=timedelta(seconds=30),
            schedule_to_close_timeout=timedelta(minutes=15),
            retry_policy=_CONFIRM,
        )
        return landed

    @workflow.signal(name=HELD_BY)
    def held_by(self, queue: str) -> None:
        """The worker queue that holds the run now (each run-loop attempt says so first)."""
        self._holder = queue

    @workflow.update(name=CONTROL)
    async def control(self, command: dict[str, Any]) -> str:
        """Deliver ``command`` to the worker holding the run; its answer, or its refusal."""
        await workflow.wait_condition(
            lambda: self._holder is not None, timeout=timedelta(seconds=60)
        )
        assert self._holder is not None
        command = {**command, "conversation_id": workflow.info().workflow_id}
        answer: str = await workflow.execute_activity(
            APPLY_CONTROL,
            command,
            task_queue=self._holder,
            # A holder that died does not answer: the caller hears it within this bound.
            schedule_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
        return answer

    @control.validator
    def _valid(self, command: dict[str, Any]) -> None:
        if command.get("action") not in {"pause", "interrupt", "steer", "cancel", "decide"}:
            raise ApplicationError(f"unknown control action {command.get('action')!r}")


@workflow.defn(name=CREATE_WORKFLOW)
class CreateWorkflow:
    """The server's create: the conversation is prepared on a worker, not started (its own
    type, so a list of open runs never counts a creation)."""

    @workflow.run
    async def run(self, start: dict[str, Any]) -> dict[str, Any]:
        conversation_id = workflow.info().workflow_id

        async def prepared() -> dict[str, Any]:
            heartbeat = timedelta(seconds=float(start["heartbeat_s"]))
            await _prepare(conversation_id, start["create"], heartbeat)
            return {"conversation_id": conversation_id, "status": "created"}

        return await _tracked(prepared())


@workflow.defn(name=ROLLBACK_WORKFLOW)
class RollbackWorkflow:
    """The server's rollback, on any worker (id = conversation id: never beside a run)."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> None:
        await _maintain(ROLLBACK, [int(args["n"]), str(args["by"])])


@workflow.defn(name=DELETE_WORKFLOW)
class DeleteWorkflow:
    """The server's delete, on any worker (id = conversation id: never beside a run)."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> None:
        await _maintain(DELETE, [bool(args["delete_branch"])])


async def _maintain(activity: str, args: list[Any]) -> None:
    await workflow.execute_activity(
        activity,
        args=[workflow.info().workflow_id, *args],
        start_to_close_timeout=timedelta(minutes=5),
        retry_policy=_MAINTAIN,
    )


async def _prepare(conversation_id: str, create: dict[str, Any], heartbeat: timedelta) -> None:
    _status("preparing")
    await workflow.execute_activity(
        PREPARE_WORKSPACE,
        args=[conversation_id, create],
        start_to_close_timeout=timedelta(minutes=5),
        # A worker killed while making the worktree is noticed after this, not 5 minutes on;
        # the retry removes what it made half-way (workspace/creating.py) and makes it again.
        heartbeat_timeout=heartbeat,
        retry_policy=_PREPARE,
    )


async def _tracked(body: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """``body``'s result, the status attribute set to its outcome (or failed / cancelled)."""
    try:
        outcome = await body
    except asyncio.CancelledError:
        _status("cancelled")
        raise
    except Exception:
        _status("failed")
        raise
    _status(str(outcome.get("status", "unknown")))
    return outcome


def _status(value: str) -> None:
    """The run's status as the Temporal UI/CLI filters by (SynthorgStatus)."""
    workflow.upsert_search_attributes([STATUS.value_set(value)])
