"""`synthorg serve` with engine temporal: runs started, controlled and watched through the API
while a `synthorg worker` holds them; the API server can die and come back mid-run; a cancel
whose holder is frozen falls back to Temporal's cancellation, a pause or steer answers 503."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.server import KeyStore, Role
from synthorg.service.demo import DEMO_TASK, create_demo_repo
from synthorg.store import open_store
from tests.distributed.conftest import TemporalServer, temporal_binary
from tests.distributed.support import TemporalWorld, sandboxes_under, start_worker
from tests.faults.harness import Proc, branch_tests_pass, check_log, synthorg
from tests.server.helpers import events
from tests.support import free_port, until_ready

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap]

_RUN_S = 300.0  # a run of a few scripted turns on a loaded 2-core machine


@pytest.fixture
def world(tmp_path: Path, pg_schema: str, temporal_server: TemporalServer) -> TemporalWorld:
    return TemporalWorld(tmp_path, pg_schema, address=temporal_server.address)


async def _start_api(world: TemporalWorld) -> tuple[Proc, str]:
    """`synthorg serve` on a free port of the world's config; returned once /ready answers."""
    port = free_port()
    server = await synthorg(world, "serve", "--port", str(port))
    url = f"http://127.0.0.1:{port}"

    def exited() -> str | None:
        return None if server.proc.returncode is None else server.output

    assert await until_ready(url, exited, _RUN_S), f"never ready:\n{server.output}"
    return server, url


async def _until(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    """The first truthy answer of ``check`` (polled, bounded)."""
    try:
        async with asyncio.timeout(_RUN_S):
            while not (answer := await check()):
                await asyncio.sleep(0.1)
            return answer
    except TimeoutError:
        raise AssertionError(f"never: {what}") from None


@pytest.mark.timeout(900)
async def test_runs_through_the_api_server_land_obey_control_and_outlive_it(
    world: TemporalWorld,
) -> None:
    key = KeyStore(world.home / "server" / "keys.json").create(
        "olga", {Role.OPERATOR, Role.APPROVER}
    )[1]
    headers = {"Authorization": f"Bearer {key}"}
    worker = await start_worker(world)
    server, url = await _start_api(world)
    api = httpx.AsyncClient(base_url=url, headers=headers, timeout=120)

    async def view(cid: str) -> dict[str, Any]:
        answer = await api.get(f"/api/conversations/{cid}")
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    async def create(repo: Path, **fields: Any) -> str:
        body = {"repository": str(repo), "prompt": DEMO_TASK, "loop": "react", **fields}
        created = await api.post("/api/conversations", json=body)
        assert created.status_code == 201, created.text + server.output
        assert created.json()["active"] is True
        return str(created.json()["id"])

    try:
        # A run started through the API lands (the worker ran it; the store has it all).
        repo = world.repo("api")
        landed = await create(repo)
        final = await _until(
            lambda: _ended(view(landed)), f"{landed} ends; worker:\n{worker.output}"
        )
        assert final["status"] == "finished" and final["active"] is False, final
        await check_log(world, landed)
        branch_tests_pass(repo, landed)
        assert any(e["event"]["kind"] == "status_change" for e in await events(api, landed))
        # The operator finds it with the Temporal CLI by project, loop and status.
        query = 'SynthorgProject="api" AND SynthorgLoop="react" AND SynthorgStatus="finished"'
        found = await _until(lambda: _listed(world, query, landed), f"{query} lists {landed}")
        assert "SynthorgRun" in found

        # Outside the allowed roots: the worker refuses it, the API server answers 403.
        outside = create_demo_repo(world.root / "elsewhere" / "other")
        refused = await api.post(
            "/api/conversations",
            json={"repository": str(outside), "prompt": DEMO_TASK, "loop": "react"},
        )
        assert refused.status_code == 403, refused.text
        assert "outside the allowed roots" in refused.json()["detail"], refused.text

        # A confirmation approved on the API server while the run waits on the worker.
        gated = await create(world.repo("gated"), model="endless", confirmation_policy="always")

        async def pending() -> list[dict[str, Any]]:
            body = (await api.get(f"/api/conversations/{gated}/confirmation")).json()
            return list(body["pending"])

        action = (await _until(pending, f"{gated} asks"))[0]["action_id"]
        decided = await api.post(
            f"/api/conversations/{gated}/confirmation", json={"accepted": [action]}
        )
        assert decided.status_code == 200, decided.text

        async def answered() -> bool:
            return any(
                e["event"].get("action_id") == action
                for e in await events(api, gated, kind="observation")
            )

        await _until(answered, f"{action} ran on the worker")
        decisions = await events(api, gated, kind="confirmation_decision")
        assert decisions[0]["event"]["approver"] == "olga"

        # Cancel from the API mid-run: cancelled, and no sandbox left on the worker.
        cancelled = await api.post(f"/api/conversations/{gated}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
        await _until(lambda: _inactive(view(gated)), f"{gated} no longer active")
        assert sandboxes_under(worker.proc.pid) == []

        # SIGKILL the API server mid-run: the run goes on; a restarted server shows it live.
        endless = await create(world.repo("endless"), model="endless", max_turns=10_000)
        await _until(
            lambda: events(api, endless, kind="observation"), f"{endless} has an observation"
        )
        server.proc.send_signal(signal.SIGKILL)
        await server.exit()
        store = await open_store(world.store_url)
        try:
            before = await store.last_seq(endless)
            await _until(
                lambda: _grew(store.last_seq(endless), before), "events while no server lives"
            )
        finally:
            await store.close()
        server, url = await _start_api(world)
        await api.aclose()
        api = httpx.AsyncClient(base_url=url, headers=headers, timeout=120)
        shown = await _until(
            lambda: _active(view(endless)), f"{endless} shown live: {await view(endless)}"
        )
        assert shown["status"] == "running", shown
        seen = (await events(api, endless))[-1]["seq"]
        await _until(
            lambda: events(api, endless, after=seen), "new events through the restarted server"
        )
        # Pause and interrupt reach the worker (both leave it paused, resumable, each logged
        # as what it was); resume starts the next run workflow.
        for action in ("pause", "interrupt"):
            answer = await api.post(f"/api/conversations/{endless}/{action}")
            assert answer.status_code == 200, answer.text
            stopped_view = await _until(lambda: _ended(view(endless)), f"{endless} {action}")
            assert stopped_view["status"] == "paused", stopped_view
            logged = await events(api, endless, kind=action)
            assert logged and logged[-1]["event"]["requested_by"] == "olga", logged
            seen = (await events(api, endless))[-1]["seq"]
            resumed = await api.post(f"/api/conversations/{endless}/resume")
            assert resumed.status_code == 200, resumed.text
            await _until(
                functools.partial(events, api, endless, after=seen, kind="observation"),
                f"{endless} runs again after {action} + resume",
            )
        stopped = await api.post(f"/api/conversations/{endless}/cancel")
        assert stopped.status_code == 200 and stopped.json()["status"] == "cancelled", stopped.text
        await _until(lambda: _inactive(view(endless)), f"{endless} no longer active")
        assert sandboxes_under(worker.proc.pid) == []
    finally:
        await api.aclose()


async def _endless_run(world: TemporalWorld, api: httpx.AsyncClient, name: str) -> str:
    """Create an endless run through the API; its id once it has made an observation."""
    body = {"repository": str(world.repo(name)), "prompt": DEMO_TASK, "loop": "react"}
    body |= {"model": "endless", "max_turns": 10_000}
    created = await api.post("/api/conversations", json=body)
    assert created.status_code == 201, created.text
    cid = str(created.json()["id"])
    await _until(lambda: events(api, cid, kind="observation"), f"{cid} has an observation")
    return cid


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
        cid = await _endless_run(world, api, "frozen")
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


@pytest.mark.timeout(900)
async def test_pause_and_steer_of_a_run_whose_holder_is_frozen_answer_503(
    world: TemporalWorld,
) -> None:
    """The only worker holds the run and is frozen, so nothing can answer for the run: pause
    and a steering message each answer 503 saying the holder is unreachable (not a 500 once
    Temporal's update call gives up), and the run is not shown paused."""
    key = KeyStore(world.home / "server" / "keys.json").create("olga", {Role.OPERATOR})[1]
    worker = await start_worker(world)
    server, url = await _start_api(world)
    api = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300)
    frozen = False
    try:
        cid = await _endless_run(world, api, "held")
        os.kill(worker.proc.pid, signal.SIGSTOP)
        frozen = True

        for what, path, payload in (
            ("pause", "pause", None),
            ("steer", "messages", {"text": "turn left"}),
        ):
            answer = await api.post(f"/api/conversations/{cid}/{path}", json=payload)
            assert answer.status_code == 503, f"{what}: {answer.text}\n{server.output}"
            refusal = answer.json()
            assert refusal["code"] == "unavailable", refusal
            assert "unreachable" in refusal["detail"] and what in refusal["detail"], refusal
        shown = (await api.get(f"/api/conversations/{cid}")).json()
        assert shown["active"] and shown["status"] == "running", shown
    finally:
        if frozen:
            os.kill(worker.proc.pid, signal.SIGCONT)
        await api.aclose()


async def _listed(world: TemporalWorld, query: str, workflow_id: str) -> str | None:
    """`temporal workflow list --query` output when it names ``workflow_id``."""
    listed = await asyncio.create_subprocess_exec(
        temporal_binary(), "workflow", "list", "--address", world.address, "--query", query,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out = (await listed.communicate())[0].decode()
    assert listed.returncode == 0, out
    return out if workflow_id in out else None


async def _ended(view: Awaitable[dict[str, Any]]) -> dict[str, Any] | None:
    body = await view
    return None if body["active"] or body["status"] in ("created", "running") else body


async def _active(view: Awaitable[dict[str, Any]]) -> dict[str, Any] | None:
    body = await view
    return body if body["active"] else None


async def _inactive(view: Awaitable[dict[str, Any]]) -> bool:
    return not (await view)["active"]


async def _grew(last: Awaitable[int], before: int) -> bool:
    return await last > before
