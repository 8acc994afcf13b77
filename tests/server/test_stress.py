"""Stress: 32 concurrent real conversations (own worktree and bwrap sandbox each, scripted
model with 0.1 s latency, 5 turns of real commands) against one, plus /health p99 under that
load, the first page of 2,000 conversations, a stalled WebSocket consumer's memory, and 100
reconnect cycles without fd growth. Figures are printed (-s) for docs/benchmarks/server.md."""

from __future__ import annotations

import asyncio
import secrets
import statistics
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psutil
import pytest
from fastapi import FastAPI

from synthorg.domain import AgentIdentity, ConversationRecord, ObservationEvent, Task
from synthorg.server import KeyStore, Role, ServerSettings, create_app

from .conftest import serving
from .helpers import make_repo, until_metric
from .real_stack import real_stack, stack_settings
from .wsclient import next_frame, open_stream

pytestmark = [pytest.mark.stress, pytest.mark.bwrap, pytest.mark.timeout(600)]

N = 32
PROC = psutil.Process()


def report(name: str, value: object) -> None:
    print(f"STRESS {name}: {value}")


class RssSampler:
    """Peak RSS of this process while active."""

    def __init__(self) -> None:
        self.peak = PROC.memory_info().rss
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, PROC.memory_info().rss)
            await asyncio.sleep(0.02)

    async def __aenter__(self) -> RssSampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


@pytest.fixture
async def stack(
    tmp_path: Path, _scripts_importable: None, key_store: KeyStore
) -> AsyncIterator[tuple[FastAPI, str, str]]:
    key = key_store.create("stress", {Role.OPERATOR})[1]
    settings = stack_settings(tmp_path / "home", latency_ms=100)
    async with real_stack(settings) as components:
        app = create_app(
            ServerSettings(ws_send_queue=64, ws_stall_timeout_s=2.0),
            store=components.store,
            run_service=components.service,
            auth=key_store,
        )
        async with serving(app) as url:
            yield app, url, key


async def run_batch(client: httpx.AsyncClient, repos: list[Path], project: str) -> float:
    started = time.perf_counter()
    created = await asyncio.gather(
        *(
            client.post(
                "/api/conversations",
                json={
                    "repository": str(r),
                    "prompt": "write 5 lines",
                    "model": "progress5",
                    "project_id": project,
                },
            )
            for r in repos
        )
    )
    ids = [c.json()["id"] for c in created]
    # One cheap poll (a count) so the watcher does not load the server it measures.
    while True:
        ended = 0
        for status in ("finished", "failed", "error", "cancelled", "paused"):
            params = {"status": status, "project": project}
            ended += (await client.get("/api/conversations/count", params=params)).json()["count"]
        if ended == len(ids):
            break
        await asyncio.sleep(0.1)
    for cid in ids:  # the commit gate runs after the status is final
        while (body := (await client.get(f"/api/conversations/{cid}")).json())["active"]:
            await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    for cid in ids:
        body = (await client.get(f"/api/conversations/{cid}")).json()
        assert body["status"] == "finished" and body["commit_sha"], body
        page = (
            await client.get(f"/api/conversations/{cid}/events", params={"kind": "observation"})
        ).json()
        assert sum("confirmed-" in e["event"]["content"] for e in page["items"]) == 5
    return elapsed


async def test_32_concurrent_conversations(stack: tuple[FastAPI, str, str], tmp_path: Path) -> None:
    _app, url, key = stack
    repos = []
    for i in range(N + 1):
        make_repo(tmp_path / f"r{i}" / "project", {"README.md": b"x\n"})
        repos.append(tmp_path / f"r{i}" / "project")
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as client:
        single = await run_batch(client, repos[:1], "single")
        baseline_rss = PROC.memory_info().rss
        health: list[float] = []

        async def probe() -> None:
            async with httpx.AsyncClient(base_url=url) as plain:
                while True:
                    t0 = time.perf_counter()
                    assert (await plain.get("/health")).status_code == 200
                    health.append(time.perf_counter() - t0)
                    await asyncio.sleep(0.01)

        prober = asyncio.create_task(probe())
        async with RssSampler() as rss:
            many = await run_batch(client, repos[1:], "many")
        prober.cancel()
    p99 = statistics.quantiles(health, n=100)[98] * 1000
    growth = (rss.peak - baseline_rss) / baseline_rss
    report("single conversation wall s", round(single, 2))
    report(f"{N} concurrent wall s", round(many, 2))
    report("wall ratio", round(many / single, 2))
    report("baseline RSS MB", round(baseline_rss / 2**20, 1))
    report("peak RSS growth x baseline", round(growth, 2))
    report("/health p99 ms under load", round(p99, 1))
    report("/health samples", len(health))
    assert growth <= 1.0
    # Wall ratio and /health latency are printed, not asserted: on a shared 2-core machine
    # they measure the neighbours as much as the server (a ratio guard failed at 17x while
    # other suites ran). Their figures live in benchmarks/ and docs/benchmarks.md.
    assert health, "/health answered while the 32 runs were going"


async def test_first_page_of_2000_conversations(
    stack: tuple[FastAPI, str, str], tmp_path: Path
) -> None:
    app, url, key = stack
    store = app.state.server.store
    now = datetime.now(UTC)
    for i in range(2000):
        moment = now - timedelta(seconds=i)
        await store.create_conversation(
            ConversationRecord(
                id=f"conv-bulk-{i:05d}",
                task=Task(id=f"t{i}", project_id="bulk", prompt="p", repository="/x"),
                agent=AgentIdentity(id="a"),
                loop_type="react",
                model="m",
                created_at=moment,
                updated_at=moment,
            )
        )
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
        timings = []
        for _ in range(20):
            t0 = time.perf_counter()
            page = (await c.get("/api/conversations", params={"limit": 50})).json()
            timings.append(time.perf_counter() - t0)
        assert len(page["items"]) == 50 and page["items"][0]["id"] == "conv-bulk-00000"
        count = (await c.get("/api/conversations/count")).json()["count"]
    median = statistics.median(timings) * 1000
    report("first page (50) of 2000 median ms", round(median, 1))
    assert count == 2000 and median < 250


async def test_stalled_consumer_memory_and_reconnect_fds(
    stack: tuple[FastAPI, str, str], tmp_path: Path
) -> None:
    app, url, key = stack
    store = app.state.server.store
    make_repo(tmp_path / "s" / "project", {"README.md": b"x\n"})
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as c:
        cid = (
            await c.post(
                "/api/conversations",
                json={"repository": str(tmp_path / "s" / "project"), "prompt": "p", "start": False},
            )
        ).json()["id"]
    stalled = await open_stream(url, cid, key, max_queue=1, compression=None, max_size=None)
    before = PROC.memory_info().rss
    big = secrets.token_hex(32768)
    async with RssSampler() as rss:
        for _ in range(800):  # 50 MiB of events pushed at a consumer that never reads
            await store.append(cid, ObservationEvent(action_id="a", content=big))
        # Until the server has closed the stalled consumer: its buffers are then released.
        await until_metric(url, 'synthorg_ws_closed_total{reason="4008"} 1.0')
    stalled_growth = (rss.peak - before) / 2**20
    report("stalled consumer: events pushed MiB", 50)
    report("stalled consumer: peak RSS growth MiB", round(stalled_growth, 1))
    await stalled.close()
    assert stalled_growth < 40

    fds_before = PROC.num_fds()
    for _ in range(100):
        ws = await open_stream(url, cid, key, after=800)
        assert (await next_frame(ws))["type"] == "subscribed"
        await ws.close()
    await until_metric(url, "synthorg_ws_connections 0.0")  # every slot given back
    deadline = time.monotonic() + 30  # then the sockets' fds, closed as their handlers end
    while (fds_after := PROC.num_fds()) - fds_before > 5 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # a poll interval: fd closes have no wake-up to wait on
    report("fds before/after 100 reconnects", f"{fds_before}/{fds_after}")
    assert fds_after - fds_before <= 5
