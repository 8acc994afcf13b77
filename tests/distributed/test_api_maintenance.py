"""Rollback and delete through `synthorg serve` on Temporal, on a worker that never held the run.

The project is only on a ``git daemon`` remote; the API server and each worker have their own
data dir. The worker that ran the conversation is stopped before the rollback, so the one that
does it can only work from the remote; the delete takes the conversation's refs off it.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.server import KeyStore, Role
from synthorg.service.demo import DEMO_TASK
from synthorg.store import open_store
from tests.distributed.conftest import TemporalServer
from tests.distributed.support import start_worker
from tests.distributed.test_api_server import _ended, _inactive, _start_api, _until
from tests.distributed.travel import TravelWorld, serve_projects
from tests.gitremote import GitDaemon
from tests.server.helpers import events

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap]


def _git(bare: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(bare), *args], capture_output=True, text=True, check=True
    ).stdout


def _rev(bare: Path, rev: str) -> str:
    return _git(bare, "rev-parse", rev).strip()


@pytest.fixture
def world(
    tmp_path: Path, pg_schema: str, temporal_server: TemporalServer, daemon: GitDaemon
) -> TravelWorld:
    remotes = serve_projects(daemon, tmp_path, ["app"])  # project app, only on the remote
    return TravelWorld(tmp_path, pg_schema, address=temporal_server.address, remotes=remotes)


@pytest.mark.timeout(900)
async def test_rollback_and_delete_through_the_api_server_on_temporal(
    world: TravelWorld, daemon: GitDaemon
) -> None:
    api_home = world.machine("api")
    key = KeyStore(api_home.home / "server" / "keys.json").create("olga", {Role.OPERATOR})[1]
    first = await start_worker(world.machine("a"))
    server, url = await _start_api(api_home)
    api = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300)

    async def create(**fields: Any) -> str:
        body = {"repository": "project:app", "prompt": DEMO_TASK, "loop": "react", **fields}
        created = await api.post("/api/conversations", json=body)
        assert created.status_code == 201, created.text + server.output
        return str(created.json()["id"])

    async def view(cid: str) -> dict[str, Any]:
        body: dict[str, Any] = (await api.get(f"/api/conversations/{cid}")).json()
        return body

    try:
        landed = await create()
        final = await _until(lambda: _ended(view(landed)), f"{landed} ends:\n{first.output}")
        assert final["status"] == "finished", final
        cps = f"refs/synthorg/checkpoints/{landed}/"
        before = daemon.refs("app", cps)
        assert len(before) >= 2, before

        # The worker that ran it stops; another one (its own data dir) does the rollback.
        first.proc.send_signal(signal.SIGTERM)
        await first.exit()
        second = await start_worker(world.machine("b"))
        missing = await api.post(f"/api/conversations/{landed}/checkpoints/999/rollback")
        assert missing.status_code == 404, missing.text
        rolled = await api.post(f"/api/conversations/{landed}/checkpoints/0/rollback")
        assert rolled.status_code == 200, rolled.text + second.output
        assert rolled.json()["by"] == "olga"
        newest = f"{cps}{len(before)}"  # the restored state, published as the newest
        bare = daemon.bare("app")
        assert daemon.refs("app", cps).keys() == {*before, newest}
        assert _rev(bare, f"{newest}^{{tree}}") == _rev(bare, f"{cps}0^{{tree}}")
        assert _rev(bare, f"synthorg/{landed}") == _rev(bare, f"{newest}^1")
        told = await events(api, landed, kind="message")
        assert "olga rolled the worktree back to checkpoint 0" in told[-1]["event"]["text"]
        made_here = world.machine("b").home / "worktrees" / landed / "app"
        assert (made_here / "calc.py").read_text() == _git(bare, "show", f"{cps}0:calc.py")

        # While a run is open: both refused (409), nothing touched.
        endless = await create(model="endless", max_turns=10_000)
        await _until(
            lambda: events(api, endless, kind="observation"), f"{endless} has an observation"
        )
        busy = await api.post(f"/api/conversations/{endless}/checkpoints/0/rollback")
        assert busy.status_code == 409, busy.text
        busy = await api.delete(f"/api/conversations/{endless}")
        assert busy.status_code == 409, busy.text
        assert busy.json()["detail"] == (  # the embedded service's answer (service.deletion)
            f"conversation {endless} is running: cancel or interrupt it before deleting"
        )
        assert f"refs/heads/synthorg/{endless}" in daemon.refs("app")  # published at creation
        stopped = await api.post(f"/api/conversations/{endless}/cancel")
        assert stopped.status_code == 200, stopped.text
        await _until(lambda: _inactive(view(endless)), f"{endless} no longer active")

        # Delete: the record goes, the remote's checkpoints with it; the branch stays unless
        # asked; the ledger keeps the runs' rows.
        gone = await api.delete(f"/api/conversations/{landed}")
        assert gone.status_code == 200, gone.text + second.output
        assert (await api.get(f"/api/conversations/{landed}")).status_code == 404
        assert daemon.refs("app", cps) == {}
        assert f"refs/heads/synthorg/{landed}" in daemon.refs("app")
        assert not made_here.exists()
        gone = await api.delete(f"/api/conversations/{endless}", params={"delete_branch": True})
        assert gone.status_code == 200, gone.text
        left = daemon.refs("app")
        assert not [ref for ref in left if endless in ref], left
        store = await open_store(world.store_url)
        try:
            assert await store.executions_of(landed)
            assert await store.executions_of(endless)
        finally:
            await store.close()
    finally:
        await api.aclose()
