"""Control crosses processes: decide, steer, cancel from a client reach the holding worker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError

from synthorg.distributed.client import control, start_run
from synthorg.domain import (
    ConfirmationPolicy,
    ConversationStatus,
    ObservationEvent,
    StoredEvent,
    Task,
    new_id,
)
from synthorg.errors import ConflictError, NotFoundError
from synthorg.service.options import RunOptions
from synthorg.store import Store, open_store
from tests.distributed.conftest import TemporalServer
from tests.distributed.support import TemporalWorld, client_of, sandboxes_under, start_worker

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address)


async def _until(
    store: Store, conversation: str, matches: Callable[[StoredEvent], bool]
) -> StoredEvent:
    """The first logged event that ``matches`` (waiting for it; the log may not exist yet)."""
    async with asyncio.timeout(300):
        while True:
            try:
                async for stored in store.tail(conversation):
                    if matches(stored):
                        return stored
            except NotFoundError:
                await asyncio.sleep(0.2)


@pytest.mark.timeout(600)
async def test_decide_steer_and_cancel_reach_the_worker_holding_the_run(
    world: TemporalWorld,
) -> None:
    worker = await start_worker(world)
    client = await client_of(world)
    store = await open_store(world.store_url)
    try:
        repo = world.repo("ctl")

        def task() -> Task:
            return Task(
                id=new_id("task"), project_id="default", prompt="keep going", repository=str(repo)
            )

        # A confirmation approved here while the run waits on the worker.
        gated = new_id("conv")
        options = RunOptions(model="endless", confirmation_policy=ConfirmationPolicy.ALWAYS)
        handle = await start_run(client, world.distributed(), gated, task=task(), options=options)
        asked = await _until(store, gated, lambda s: s.event.kind == "confirmation_request")
        assert asked.event.kind == "confirmation_request"
        action = asked.event.pending[0].action_id
        await control(client, gated, {"action": "decide", "accepted": [action], "by": "alice"})
        decided = await _until(store, gated, lambda s: s.event.kind == "confirmation_decision")
        assert decided.event.kind == "confirmation_decision"
        assert decided.event.accepted == (action,) and decided.event.approver == "alice"
        ran = await _until(
            store,
            gated,
            lambda s: isinstance(s.event, ObservationEvent) and s.event.action_id == action,
        )
        assert "turn 1" in ran.event.content  # type: ignore[union-attr]
        # A steering message, logged by the worker's own service.
        await control(client, gated, {"action": "steer", "text": "also say hello"})
        await _until(
            store,
            gated,
            lambda s: s.event.kind == "message" and s.event.text == "also say hello",
        )
        # Cancel through the same channel: the run ends CANCELLED, its sandbox gone.
        status = await control(client, gated, {"action": "cancel", "by": "alice"})
        assert status == ConversationStatus.CANCELLED.value
        result = await handle.result()
        assert result["termination_reason"] == "cancelled"
        assert sandboxes_under(worker.proc.pid) == []
        with pytest.raises(ConflictError, match="no active run"):
            await control(client, gated, {"action": "pause"})

        # Temporal's own cancellation of a running workflow stops the run the same way.
        endless = new_id("conv")
        handle = await start_run(
            client, world.distributed(), endless, task=task(), options=RunOptions(model="endless")
        )
        await _until(store, endless, lambda s: s.event.kind == "observation")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        record = await store.get_conversation(endless)
        assert record.status is ConversationStatus.CANCELLED
        assert sandboxes_under(worker.proc.pid) == []
    finally:
        await store.close()
