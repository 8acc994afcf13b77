"""A SIGKILLed worker's bearer dies with its lease, and its run is swept with no reader
(issue 29, finding 1): the worker form of ``tests/faults/test_lease.py``.

The one worker runs "on another host" (its own UTS namespace), so nothing can tell it died but
its lease (2 x the heartbeat timeout); no other worker is there to take the run over.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.domain import ObservationEvent
from synthorg.store import open_store
from synthorg.store.codec import RESTART_OBSERVATION
from tests.distributed.conftest import TemporalServer
from tests.distributed.support import HEARTBEAT_S, TemporalWorld, start_slow_run, start_worker
from tests.faults.lease_support import ELSEWHERE, boundaries, killed_then_lapsed_and_swept

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]

LEASE_S = 2 * HEARTBEAT_S
"""A worker's run lease (``synthorg.distributed.worker``)."""


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address)


@pytest.mark.timeout(600)
async def test_a_killed_workers_bearer_dies_with_its_lease_and_its_run_is_swept(
    world: TemporalWorld,
) -> None:
    worker = await start_worker(world, prefix=ELSEWHERE)
    _, client, conversation, slow = await start_slow_run(world, "lease")
    store = await open_store(world.store_url)
    try:
        async with boundaries(world, store, conversation) as run:
            await killed_then_lapsed_and_swept(run, worker, LEASE_S, "worker")
            events = [s.event for s in await store.history(conversation, limit=10_000)]
            (answer,) = [
                e for e in events if isinstance(e, ObservationEvent) and e.action_id == slow
            ]
            assert answer.content == RESTART_OBSERVATION  # the tool call it died in
    finally:
        await store.close()
    client.proc.kill()
    await client.exit()
