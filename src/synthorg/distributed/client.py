"""Starting and controlling runs through Temporal: what `synthorg run` and the server call."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from synthorg.distributed import attributes
from synthorg.distributed.config import DistributedConfig
from synthorg.distributed.names import CONTROL, CREATE_WORKFLOW, WORKFLOW
from synthorg.domain import Task
from synthorg.engine import EngineConfig, select_loop_type
from synthorg.errors import ConflictError
from synthorg.service.options import RunOptions


async def start_run(
    client: Client,
    config: DistributedConfig,
    conversation_id: str,
    *,
    task: Task | None = None,
    options: RunOptions | None = None,
    message: str | None = None,
    labels: tuple[str, str] | None = None,
    run: bool = True,
) -> WorkflowHandle[Any, Any]:
    """Start the run's workflow (id = conversation id); ConflictError while one is running.

    With ``task`` the first activity creates the conversation; without, it must exist.
    ``labels``: (project, loop) for the search attributes (default: the task's project and
    the forced loop). ``run=False`` only creates
    (the CreateWorkflow: ``task`` required).
    """
    create = None
    if labels is None:
        forced = options.loop if options is not None else None
        labels = (task.project_id if task else "", forced or "")
    if task is not None:
        create = {
            "task": task.model_dump(mode="json"),
            "options": (options or RunOptions()).model_dump(mode="json"),
        }
    start = {
        "create": create,
        "message": message,
        "heartbeat_s": config.heartbeat_timeout_s,
    }
    await attributes.register(client, config.namespace)
    return await start_exclusive(
        client,
        config,
        WORKFLOW if run else CREATE_WORKFLOW,
        start,
        conversation_id,
        search_attributes=attributes.initial(*labels),
    )


async def start_exclusive(
    client: Client,
    config: DistributedConfig,
    workflow: str,
    arg: dict[str, Any],
    conversation_id: str,
    *,
    search_attributes: TypedSearchAttributes | None = None,
) -> WorkflowHandle[Any, Any]:
    """Start ``workflow`` with the conversation's id: ConflictError while any workflow of the
    conversation (a run, a creation, a rollback, a delete) is open."""
    try:
        return await client.start_workflow(
            workflow,
            arg,
            id=conversation_id,
            task_queue=config.task_queue,
            search_attributes=search_attributes,
            # A new run of a conversation whose last run ended is fine; two at once are not.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        )
    except WorkflowAlreadyStartedError as exc:
        raise ConflictError(
            f"conversation {conversation_id} already has an active run (workflow running)"
        ) from exc


def chosen(task: Task, options: RunOptions, engine: EngineConfig) -> tuple[RunOptions, str]:
    """The options with the loop chosen here (by this process's engine config, as the
    embedded mode would), so the worker runs it and the search attribute names it."""
    loop = select_loop_type(task, engine, forced=options.loop)
    # Only RunOptions' own fields: a request model subclassing it carries more.
    fields = options.model_dump(include=set(RunOptions.model_fields))
    return RunOptions.model_validate({**fields, "loop": loop}), loop


async def control(client: Client, conversation_id: str, command: dict[str, Any]) -> str:
    """Deliver a control command to the worker holding the run; the status afterwards.

    ConflictError when the run is not active or the holder refused the command.
    """
    handle = client.get_workflow_handle(conversation_id)
    try:
        answer: str = await handle.execute_update(CONTROL, command)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        raise ConflictError(f"{command.get('action')}: {getattr(cause, 'message', cause)}") from exc
    except RPCError as exc:
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise
        raise ConflictError(
            f"conversation {conversation_id} has no active run ({exc.message})"
        ) from exc
    return answer
