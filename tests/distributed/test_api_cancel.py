"""Cancel through `synthorg serve` on Temporal when the worker holding the run cannot answer.

The holder is frozen (SIGSTOP): the control update goes unanswered, so after its bound the
server falls back to Temporal's cancellation instead of failing the request; the run then
ends cancelled on another worker once the frozen one's heartbeat has timed out.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from synthorg.server import KeyStore, Role
from synthorg.service.demo import DEMO_TASK
from tests.distributed.conftest import TemporalServer
from tests.distributed.support import TemporalWorld, start_worker
from tests.distributed.test_api_server import _start_api, _until
from tests.faults.harness import Proc
from tests.server.helpers import events

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap]


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address)


@pytest.mark.timeout(900)
async def test_cancel_of_a_run_whose_holder_is_frozen_falls_back_to_temporal(
    world: TemporalWorld,
) -> None:
    key = KeyStore(world.home / "server" / "keys.json").create("olga", {Role.OPERATOR})[1]
    workers = [await start_worker(world)]
    server, url = await _start_api(world)
    api = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300)
    frozen: Proc | None = None
    try:
        body = {"repository": str(world.repo("frozen")), "prompt": DEMO_TASK, "loop": "react"}
        body |= {"model": "endless", "max_turns": 10_000}
        created = await api.post("/api/conversations", json=body)
        assert created.status_code == 201, created.text
        cid = created.json()["id"]
        await _until(lambda: events(api, cid, kind="observation"), f"{cid} has an observation")
        workers.append(await start_worker(world))  # where the run goes once cancelled
        frozen = workers[0]
        os.kill(frozen.proc.pid, signal.SIGSTOP)

        answer = await api.post(f"/api/conversations/{cid}/cancel")
        assert answer.status_code == 200, answer.text + server.output

        async def ended() -> bool:
            view = (await api.get(f"/api/conversations/{cid}")).json()
            return not view["active"]

        await _until(ended, f"{cid}'s workflow ends after Temporal's cancellation")
    finally:
        if frozen is not None:
            os.kill(frozen.proc.pid, signal.SIGCONT)
        await api.aclose()
