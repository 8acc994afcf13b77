"""``synthorg run --engine temporal``: the run is a workflow; this terminal starts, watches it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from rich.text import Text

from synthorg.cli.common import console
from synthorg.cli.untrusted import visible

if TYPE_CHECKING:
    from temporalio.client import WorkflowHandle

    from synthorg.domain import Task
    from synthorg.service.options import RunOptions
    from synthorg.settings import Settings
    from synthorg.store import Store

_CATCH_UP_S = 10.0
_RECONNECT_FIRST_S = 0.5
_RECONNECT_MAX_S = 5.0
_UNREACHABLE_S = 900.0
"""Give up following once Temporal has not answered for this long (the run goes on)."""
_CONNECTED_S = 60.0
"""A wait for the result that failed only after this long had been connected meanwhile."""


async def execute_temporal_run(
    settings: Settings,
    task: Task | None,
    options: RunOptions,
    resume: str | None,
    message: str | None,
) -> dict[str, Any]:
    """Start the workflow, print its events from the shared store, then the outcome."""
    from temporalio.client import WorkflowFailureError

    from synthorg.distributed.client import chosen, start_run
    from synthorg.distributed.config import distributed_config
    from synthorg.distributed.worker import connect
    from synthorg.domain import new_id
    from synthorg.service.store import opened_store

    config = distributed_config(settings)
    client = await connect(config)
    async with opened_store(settings) as store:
        after = 0
        labels = None
        if resume is not None:
            record = await store.get_conversation(resume)  # NotFoundError before anything starts
            after = await store.last_seq(resume)
            labels = (record.task.project_id, record.loop_type)
        elif task is not None:
            options, loop = chosen(task, options, settings.engine)
            labels = (task.project_id, loop)
        conversation_id = resume or new_id("conv")
        handle = await start_run(
            client,
            config,
            conversation_id,
            task=task,
            options=options,
            message=message,
            labels=labels,
        )
        console.print(
            Text(f"conversation {conversation_id}  (engine: temporal, queue {config.task_queue})")
        )
        follower = _Follower(store, conversation_id)
        printing = asyncio.create_task(follower.follow(after))
        try:
            result: dict[str, Any] = await _result(handle, config.address)
        except WorkflowFailureError as exc:
            result = {"termination_reason": "error", "error": str(exc.cause or exc)}
        except asyncio.CancelledError:
            console.print("\ncancelling...", style="bold yellow")
            await handle.cancel()
            with contextlib.suppress(WorkflowFailureError):
                await handle.result()
            result = {"termination_reason": "cancelled", "error": "cancelled from the terminal"}
        finally:
            await follower.catch_up(printing)
        record = await store.get_conversation(conversation_id)
    _print_outcome(conversation_id, record.status.value, result)
    return result


async def _result(handle: WorkflowHandle[Any, Any], address: str) -> dict[str, Any]:
    """The workflow's result, waiting out a Temporal server that restarts or is unreachable
    for a while: the run goes on on the workers, so this terminal reconnects with back-off."""
    from temporalio.service import RPCError, RPCStatusCode

    transient = {
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.UNKNOWN,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.CANCELLED,
        RPCStatusCode.ABORTED,
        RPCStatusCode.INTERNAL,
    }
    clock = asyncio.get_running_loop().time
    delay = _RECONNECT_FIRST_S
    down_since: float | None = None
    while True:
        asked = clock()
        try:
            result: dict[str, Any] = await handle.result()
            return result
        except RPCError as exc:
            if exc.status not in transient:
                raise
            now = clock()
            if down_since is None or now - asked > _CONNECTED_S:  # a new outage
                down_since, delay = asked, _RECONNECT_FIRST_S
                console.print(
                    Text(f"temporal at {address} unreachable ({exc.message}); reconnecting"),
                    style="yellow",
                )
            if now - down_since > _UNREACHABLE_S:
                raise
            await asyncio.sleep(delay)
            delay = min(2 * delay, _RECONNECT_MAX_S)


class _Follower:
    """Prints the conversation's events as workers append them to the shared store."""

    def __init__(self, store: Store, conversation_id: str) -> None:
        self._store = store
        self._id = conversation_id
        self.printed = 0
        self._advanced = asyncio.Event()

    async def follow(self, after: int) -> None:
        from synthorg.cli.render import event_line
        from synthorg.errors import NotFoundError

        self.printed = after
        while True:  # the first activity creates the conversation; until then there is no log
            try:
                async for stored in self._store.tail(self._id, after=self.printed):
                    console.print(event_line(stored))
                    self.printed = stored.seq
                    self._advanced.set()
            except NotFoundError:
                await asyncio.sleep(0.2)

    async def catch_up(self, printing: asyncio.Task[None]) -> None:
        """Print up to the last stored event (bounded), then stop following."""
        try:
            last = await self._store.last_seq(self._id)
            async with asyncio.timeout(_CATCH_UP_S):
                while self.printed < last and not printing.done():
                    self._advanced.clear()
                    await self._advanced.wait()
        except TimeoutError:
            pass
        finally:
            printing.cancel()
            with contextlib.suppress(BaseException):
                await printing


def _print_outcome(conversation_id: str, status: str, result: dict[str, Any]) -> None:
    rows = {
        "termination": str(result.get("termination_reason")),
        "status": status,
        "branch": str(result.get("branch") or "(none)"),
        "commit": str(result.get("commit_sha") or "(no commit)"),
    }
    if result.get("error"):
        rows["error"] = str(result["error"])
    for key, value in rows.items():
        console.print(Text(f"{key}: {visible(value)}"))
    console.print(Text(f"conversation: {conversation_id}  (engine: temporal)"))
