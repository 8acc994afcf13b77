"""Temporal engine vs embedded: overhead per run, failover time, throughput by worker count.

Everything real, in one run of this script: a Temporal dev server (on-disk db), PostgreSQL
(a fresh schema), `synthorg worker` processes, bwrap sandboxes, the scripted demo model (the
react loop fixing the demo repository, latency 0 so the control plane is what is measured).

- overhead: the same task run one at a time, embedded (`LocalRunService` in this process)
  and through Temporal (start the workflow, wait for its result; one worker): mean wall time
  per run, and the difference.
- failover: a run whose first tool call sleeps; SIGKILL the worker holding it; time from the
  kill to the first event the successor appends (heartbeat timeout as configured below).
- through the API ([api] lines): a real embedded `synthorg serve` vs a `synthorg serve` with
  engine temporal and 1, 2, 3 `synthorg worker` processes: one run at a time (POST to seen
  finished: the overhead an API client sees), then bursts of runs at once: runs/minute and
  CPU seconds per run (every process of ours, their children, the Temporal server).

- control through the API ([control] lines): steer, pause, interrupt, a confirmation
  decision and cancel POSTed to an embedded `synthorg serve` (baseline) and to one on
  Temporal (the worker holding the run answers): p50 / p99 per action and pooled.

    uv run python benchmarks/distributed_bench.py [--runs 5] [--burst 6] [--failover-only]
        [--control-rounds 20] [--only-control]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil

from support import free_port, temporal_on_postgres
from synthorg.distributed.client import control, start_run
from synthorg.distributed.config import DistributedConfig
from synthorg.distributed.worker import connect
from synthorg.domain import ActionEvent, Task, new_id
from synthorg.logging import configure_logging
from synthorg.sandbox.quota import ROOT_ENV as QUOTA_ROOT_ENV
from synthorg.sandbox.quota_sweep import sweep_stale
from synthorg.server import KeyStore, Role
from synthorg.service.boot import boot
from synthorg.service.demo import DEMO_TASK, create_demo_repo
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.options import RunOptions
from synthorg.settings import load_settings
from synthorg.store import open_store

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the scripted models live in tests/
HEARTBEAT_S = 10.0
"""The run-loop heartbeat timeout (the default): long enough that a loaded worker's
heartbeats (sent every 2.5 s) never miss it, short enough that failover is seconds."""


class Bench:
    def __init__(self, root: Path, store_url: str, address: str) -> None:
        self.root, self.store_url, self.address = root, store_url, address
        self.queue = f"bench-{secrets.token_hex(3)}"
        self.config = root / "synthorg.toml"
        self.config.write_text(
            '[[gateway.providers]]\nname = "scripted"\nkind = "scripted"\n'
            'models = ["m", "slow", "endless"]\nscript = "tests.faults.scripts:resilient_fix"\n'
            'latency_ms = 0\nscripts = { slow = "tests.distributed.scripts:slow_then_fix", '
            'endless = "synthorg.engine.native.scripts:endless_script" }\n'
            '[run]\nmodel = "m"\nshutdown_grace_s = 0.5\n[sandbox]\nbackend = "bwrap"\n'
            f'[store]\nurl = "{store_url}"\n'
            # Workers (and API servers) apply the server's repository rule.
            f'[server]\nrepository_roots = ["{root / "repos"}"]\n'
            f'[distributed]\nengine = "temporal"\naddress = "{address}"\n'
            f'task_queue = "{self.queue}"\nheartbeat_timeout_s = {HEARTBEAT_S}\n'
        )
        self.home = root / "home"
        self.quota = root / "quota"
        """Its processes' worktree quotas: what a killed worker left is released from here."""
        self.tmp = root / "tmp"
        """Their TMPDIR: a killed process's temp dirs (no atexit ran) go with ``root``."""
        self.tmp.mkdir()
        self.count = 0
        self.workers: list[subprocess.Popen[bytes]] = []
        self.orchestration: list[float] = []
        """Per Temporal run: wall time minus the time inside the activities that do the
        embedded mode's work (prepare_workspace = create, run_loop = run + gate)."""

    @property
    def distributed(self) -> DistributedConfig:
        return DistributedConfig(
            address=self.address, task_queue=self.queue, heartbeat_timeout_s=HEARTBEAT_S
        )

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
        env.update(SYNTHORG_HOME=str(self.home), PYTHONPATH=str(ROOT), TMPDIR=str(self.tmp))
        env[QUOTA_ROOT_ENV] = str(self.quota)
        return env

    def task(self) -> Task:
        self.count += 1
        repo = create_demo_repo(self.root / "repos" / f"r{self.count}")
        return Task(id=new_id("task"), project_id="bench", prompt=DEMO_TASK, repository=str(repo))

    def start_worker(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "synthorg.cli.app", "worker", "-c", str(self.config)],
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        for line in proc.stdout:  # boot, then the ready line
            if b" ready: " in line:
                break
        else:
            raise RuntimeError("worker exited before it was ready")
        # Drained from now on: a full pipe would block the worker's next log line (and with
        # it every run and control command it holds).
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        self.workers.append(proc)
        return proc

    def stop_workers(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.workers.clear()

    async def temporal_runs(self, n: int, options: RunOptions) -> list[float]:
        """Wall seconds per run (start to result), and each run's orchestration overhead."""
        client = await connect(self.distributed)

        async def one() -> float:
            started = time.perf_counter()
            handle = await start_run(
                client, self.distributed, new_id("conv"), task=self.task(), options=options
            )
            result = await handle.result()
            wall = time.perf_counter() - started
            assert result["termination_reason"] == "completed", result
            self.orchestration.append(wall - await _work_s(handle))
            return wall

        return list(await asyncio.gather(*(one() for _ in range(n))))

    @asynccontextmanager
    async def embedded(self) -> AsyncIterator[object]:
        os.environ["SYNTHORG_HOME"] = str(self.root / "embedded-home")
        settings = load_settings(self.config)
        async with boot(
            settings, registry=default_registry(), provisioner=default_provisioner
        ) as components:
            yield components.service

    async def embedded_runs(self, service: object, n: int, options: RunOptions) -> list[float]:
        from synthorg.service.runs import LocalRunService

        assert isinstance(service, LocalRunService)

        async def one() -> float:
            started = time.perf_counter()
            record = await service.create(self.task(), options)
            result = await service.run(record.id)
            assert result.termination_reason.value == "completed", result
            return time.perf_counter() - started

        return list(await asyncio.gather(*(one() for _ in range(n))))


class Api:
    """A real `synthorg serve` over the bench's store: embedded, or temporal (runs on the
    bench's workers); runs are created through its REST API and watched there."""

    def __init__(self, bench: Bench, engine: str) -> None:
        self.bench, self.engine = bench, engine
        self.home = bench.root / f"serve-{engine}"
        self.config = bench.root / f"serve-{engine}.toml"
        text = bench.config.read_text().replace('engine = "temporal"', f'engine = "{engine}"')
        self.config.write_text(text)
        key = KeyStore(self.home / "server" / "keys.json").create(
            "bench", {Role.OPERATOR, Role.APPROVER}
        )[1]
        self.headers = {"Authorization": f"Bearer {key}"}
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    async def __aenter__(self) -> Api:
        port = free_port()
        env = {**self.bench.env(), "SYNTHORG_HOME": str(self.home)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "synthorg.cli.app", "serve", "--port", str(port), "-c",
             str(self.config)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=self.url) as client:
            for _ in range(6000):
                assert self.proc.poll() is None, "serve exited"
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get("/ready")).status_code == 200:
                        return self
                await asyncio.sleep(0.05)
        raise RuntimeError("serve never became ready")

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)

    async def runs(self, n: int) -> list[float]:
        """n runs at once through the API: seconds from POST to seeing each one finished.

        Polled every 50 ms alone, 0.5 s in a burst: the polls are requests the server
        answers, and at 50 ms x n they would cost more CPU than the runs."""
        poll_s = 0.05 if n == 1 else 0.5
        async with httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=300) as api:

            async def one() -> float:
                started = time.perf_counter()
                body = {"repository": self.bench.task().repository, "prompt": DEMO_TASK,
                        "loop": "react"}  # fmt: skip
                created = await api.post("/api/conversations", json=body)
                assert created.status_code == 201, created.text
                cid = created.json()["id"]
                while True:
                    view = (await api.get(f"/api/conversations/{cid}")).json()
                    if not view["active"] and view["status"] not in ("created", "running"):
                        assert view["status"] == "finished", view
                        return time.perf_counter() - started
                    await asyncio.sleep(poll_s)

            return list(await asyncio.gather(*(one() for _ in range(n))))

    def pids(self) -> list[int]:
        assert self.proc is not None
        return [self.proc.pid]


async def _work_s(handle: Any) -> float:
    """Seconds the run spent executing prepare_workspace and run_loop (from its history)."""
    scheduled: dict[int, str] = {}
    began: dict[int, float] = {}
    work = 0.0
    async for event in handle.fetch_history_events():
        attrs = event.activity_task_scheduled_event_attributes
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled[event.event_id] = attrs.activity_type.name
        elif event.HasField("activity_task_started_event_attributes"):
            began[event.activity_task_started_event_attributes.scheduled_event_id] = (
                event.event_time.ToDatetime().timestamp()
            )
        elif event.HasField("activity_task_completed_event_attributes"):
            sid = event.activity_task_completed_event_attributes.scheduled_event_id
            if scheduled.get(sid) in ("prepare_workspace", "run_loop"):
                work += event.event_time.ToDatetime().timestamp() - began[sid]
    return work


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
            for child in proc.children(recursive=True):
                ct = child.cpu_times()
                total += ct.user + ct.system
        except psutil.NoSuchProcess:
            pass
    return total


async def control_latency(bench: Bench, commands: int) -> list[float]:
    """Seconds per steer update answered by the worker holding an endless run."""
    bench.start_worker()
    client = await connect(bench.distributed)
    cid = new_id("conv")
    handle = await start_run(
        client,
        bench.distributed,
        cid,
        task=bench.task(),
        options=RunOptions(model="endless", max_turns=10_000),
    )
    store = await open_store(bench.store_url)
    try:
        while True:
            try:
                async for stored in store.tail(cid):
                    if stored.event.kind == "observation":
                        break
                break
            except Exception:
                await asyncio.sleep(0.1)
    finally:
        await store.close()
    seconds = []
    for n in range(commands):
        started = time.perf_counter()
        await control(client, cid, {"action": "steer", "text": f"note {n}"})
        seconds.append(time.perf_counter() - started)
    await control(client, cid, {"action": "cancel"})
    await handle.result()
    bench.stop_workers()
    return seconds


CONTROLS = ("steer", "pause", "interrupt", "decide", "cancel")


async def api_control(api: Api, rounds: int) -> tuple[dict[str, list[float]], list[float]]:
    """Seconds per control command POSTed to ``api`` until answered (on Temporal: by the
    worker holding the run, through the workflow's update), by action; and, for every
    command, until the holding process logged it (its event's store timestamp: the same
    host's clock), which for interrupt and cancel excludes stopping the run.

    Each round: 5 steers, then pause, interrupt, a confirmation decision and cancel, each on
    a run that is working (an observation logged since it was last started), so no command
    waits for a run to start; the waits between commands are not measured."""
    seconds: dict[str, list[float]] = {action: [] for action in CONTROLS}
    reached: list[float] = []
    logged_as = {"steer": "message", "decide": "confirmation_decision"}
    async with httpx.AsyncClient(base_url=api.url, headers=api.headers, timeout=300) as http:

        async def post(path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
            answer = await http.post(f"/api/conversations/{path}".rstrip("/"), json=body)
            assert answer.status_code in (200, 201), (answer.status_code, answer.text)
            result: dict[str, Any] = answer.json()
            return result

        async def timed(action: str, cid: str, path: str, body: Any = None) -> None:
            kind = logged_as.get(action, action)
            url = f"/api/conversations/{cid}/events"
            seen = (await http.get(url, params={"kind": kind, "limit": 1})).json()["last_seq"]
            wall, started = time.time(), time.perf_counter()
            await post(f"{cid}/{path}", body)
            seconds[action].append(time.perf_counter() - started)
            while not (
                items := (
                    await http.get(url, params={"after": seen, "kind": kind, "limit": 1})
                ).json()["items"]
            ):  # a decision is logged by the loop once it has it: maybe after the answer
                await asyncio.sleep(0.05)
            reached.append(datetime.fromisoformat(items[0]["timestamp"]).timestamp() - wall)

        async def working(cid: str, after: int) -> int:
            """Until the run logs an observation after seq ``after``; the last seq then."""
            while True:
                page = (
                    await http.get(
                        f"/api/conversations/{cid}/events",
                        params={"after": after, "kind": "observation", "limit": 1},
                    )
                ).json()
                if page["items"]:
                    return int(page["items"][-1]["seq"])
                await asyncio.sleep(0.05)

        async def stopped(cid: str) -> None:
            while (await http.get(f"/api/conversations/{cid}")).json()["active"]:
                await asyncio.sleep(0.05)

        async def pending(cid: str) -> list[str]:
            while True:
                body = (await http.get(f"/api/conversations/{cid}/confirmation")).json()
                if body["pending"]:
                    return [p["action_id"] for p in body["pending"]]
                await asyncio.sleep(0.05)

        def create(**fields: Any) -> dict[str, Any]:
            repo = api.bench.task().repository
            body = {"repository": repo, "prompt": DEMO_TASK, "loop": "react"}
            return {**body, "model": "endless", "max_turns": 10_000, **fields}

        steered = str((await post("", create()))["id"])
        gated = str((await post("", create(confirmation_policy="always")))["id"])
        seq = await working(steered, 0)
        for _ in range(rounds):
            for n in range(5):
                await timed("steer", steered, "messages", {"text": f"note {n}"})
            for action in ("pause", "interrupt"):
                seq = await working(steered, seq)
                await timed(action, steered, action)
                await stopped(steered)
                await post(f"{steered}/resume")
            await timed("decide", gated, "confirmation", {"accepted": await pending(gated)})
            doomed = str((await post("", create()))["id"])
            await working(doomed, 0)
            await timed("cancel", doomed, "cancel")
        for cid in (steered, gated):
            await post(f"{cid}/cancel")
    return seconds, reached


def _control_figures(engine: str, measured: tuple[dict[str, list[float]], list[float]]) -> float:
    """Print p50 / p99 / max per action, pooled, and until logged; the pooled p99."""
    seconds, reached = measured
    pooled = sorted(s for samples in seconds.values() for s in samples)
    for action, samples in [*seconds.items(), ("all", pooled), ("all, until logged", reached)]:
        p50, p99 = statistics.median(samples), _p99(samples)
        print(
            f"[control] {engine} serve, {action}: p50 {p50 * 1000:.0f} ms, p99 "
            f"{p99 * 1000:.0f} ms, max {max(samples) * 1000:.0f} ms over {len(samples)} "
            f"(load {os.getloadavg()[0]:.1f})"
        )
    return _p99(pooled)


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, round(len(ordered) * 0.99) - 1)]


async def control_through_the_api(bench: Bench, rounds: int) -> None:
    """Control commands POSTed to an embedded `synthorg serve` (the baseline: the run is in
    the server's process) and to `synthorg serve` on Temporal with one worker holding it."""
    async with Api(bench, "embedded") as embedded:
        b99 = _control_figures("embedded", await api_control(embedded, rounds))
    bench.start_worker()
    async with Api(bench, "temporal") as temporal:
        t99 = _control_figures("temporal", await api_control(temporal, rounds))
    bench.stop_workers()
    print(
        f"[control] all actions until answered, p99: temporal {t99 * 1000:.0f} ms vs embedded "
        f"{b99 * 1000:.0f} ms ({t99 / b99:.1f}x; target <= 500 ms)"
    )


async def failover(bench: Bench) -> float:
    """Seconds from SIGKILL of the holding worker to the successor's first event."""
    bench.start_worker()
    bench.start_worker()
    client = await connect(bench.distributed)
    cid = new_id("conv")
    handle = await start_run(
        client, bench.distributed, cid, task=bench.task(), options=RunOptions(model="slow")
    )
    store = await open_store(bench.store_url)
    try:
        while True:  # the slow call is logged: its worker is inside it
            try:
                history = await store.history(cid, limit=1000)
            except Exception:
                history = []
            if any(isinstance(s.event, ActionEvent) for s in history):
                break
            await asyncio.sleep(0.1)
        owner = await store.conversation_owner(cid)
        assert owner is not None
        last = history[-1].seq
        os.kill(owner.pid, signal.SIGKILL)
        killed = time.time()
        async for stored in store.tail(cid, after=last):
            first = stored.timestamp.timestamp()
            break
        result = await handle.result()
        assert result["termination_reason"] == "completed", result
    finally:
        await store.close()
        bench.stop_workers()
        # The killed worker's quota is still mounted over the run's worktree (under the
        # successor's until that one released it): the sweep a booting process would do.
        released = sum(sweep_stale(owner) for owner in bench.quota.glob("owner-*"))
        print(f"failover: released {released} quota(s) the killed worker left mounted")
    return first - killed


async def through_the_api(bench: Bench, temporal_pid: int, runs: int, burst: int) -> None:
    """Embedded `synthorg serve` vs `synthorg serve` (temporal) + 1, 2, 3 workers, both
    servers up at once: per-run wall one at a time, alternating (the overhead an API client
    sees), then bursts of ``burst`` runs; the embedded burst before and after the temporal
    ones, so a load swing on this shared machine shows instead of hiding in a ratio."""

    async def embedded_burst() -> tuple[float, float]:
        cpu0, t0 = _cpu(embedded.pids()), time.perf_counter()
        await embedded.runs(burst)
        wall, cpu = time.perf_counter() - t0, _cpu(embedded.pids()) - cpu0
        rate = burst / wall * 60
        print(
            f"[api] throughput embedded serve: {rate:.1f} runs/min, {cpu / burst:.2f} CPU "
            f"s/run (load {os.getloadavg()[0]:.1f})"
        )
        return rate, cpu / burst

    async with Api(bench, "embedded") as embedded, Api(bench, "temporal") as temporal:
        bench.start_worker()
        await embedded.runs(1)  # warm-ups
        await temporal.runs(1)
        serial_e: list[float] = []
        serial_t: list[float] = []
        for _ in range(runs):
            serial_e += await embedded.runs(1)
            serial_t += await temporal.runs(1)
        e, t = statistics.median(serial_e), statistics.median(serial_t)
        print(
            f"[api] one run at a time, POST to seen finished: embedded serve p50 "
            f"{e * 1000:.0f} ms, temporal serve + 1 worker p50 {t * 1000:.0f} ms: added "
            f"{(t - e) * 1000:.0f} ms ({runs} runs each, alternating; load "
            f"{os.getloadavg()[0]:.1f})"
        )
        base = (await embedded_burst())[0]
        for count in (1, 2, 3):
            while len(bench.workers) < count:
                bench.start_worker()
            parts = {
                "workers": [w.pid for w in bench.workers],
                "temporal": [temporal_pid],
                "api": temporal.pids(),
            }
            before = {name: _cpu(pids) for name, pids in parts.items()}
            t0 = time.perf_counter()
            await temporal.runs(burst)
            wall = time.perf_counter() - t0
            per_run = {name: (_cpu(parts[name]) - before[name]) / burst for name in parts}
            rate = burst / wall * 60
            print(
                f"[api] throughput temporal serve + {count} worker(s): {rate:.1f} runs/min "
                f"({rate / base:.2f}x embedded), {sum(per_run.values()):.2f} CPU s/run: "
                + ", ".join(f"{name} {cpu:.3f}" for name, cpu in per_run.items())
                + f" (load {os.getloadavg()[0]:.1f})"
            )
        await embedded_burst()
    bench.stop_workers()


async def main(
    runs: int,
    burst: int,
    failover_only: bool = False,
    control_rounds: int = 20,
    only_control: bool = False,
) -> None:
    configure_logging("WARNING")
    options = RunOptions(loop="react")
    async with temporal_on_postgres("distbench") as scratch:
        bench = Bench(scratch.root, scratch.store_url, scratch.address)
        try:
            await _rounds(bench, scratch.server_pid, options, runs, burst,
                          failover_only, control_rounds, only_control)  # fmt: skip
        finally:
            bench.stop_workers()
            _remove(scratch.root, bench.quota)


async def _rounds(
    bench: Bench,
    server_pid: int,
    options: RunOptions,
    runs: int,
    burst: int,
    failover_only: bool,
    control_rounds: int,
    only_control: bool,
) -> None:
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cpus")
    if only_control:
        await control_through_the_api(bench, control_rounds)
        return
    if failover_only:
        await _failover_round(bench)
        return
    # Overhead: one at a time, alternating so load drifts hit both alike.
    worker = bench.start_worker()
    embedded_s: list[float] = []
    temporal_s: list[float] = []
    async with bench.embedded() as service:
        await bench.embedded_runs(service, 1, options)  # warm-up
        await bench.temporal_runs(1, options)
        bench.orchestration.clear()
        for _ in range(runs):
            embedded_s += await bench.embedded_runs(service, 1, options)
            temporal_s += await bench.temporal_runs(1, options)
        e, t = statistics.median(embedded_s), statistics.median(temporal_s)
        orchestration = statistics.median(bench.orchestration)
        print(
            f"orchestration added by Temporal per run (wall minus the activities doing "
            f"the embedded work, from the workflow history): p50 "
            f"{orchestration * 1000:.0f} ms, max {max(bench.orchestration) * 1000:.0f} ms"
        )
        print(
            f"overhead: embedded p50 {e * 1000:.0f} ms, temporal p50 {t * 1000:.0f} ms, "
            f"added {(t - e) * 1000:.0f} ms per run ({t / e:.2f}x), {runs} runs each"
        )
    del worker
    bench.stop_workers()
    await through_the_api(bench, server_pid, runs, burst)
    bench.stop_workers()
    await control_through_the_api(bench, control_rounds)
    latency = sorted(await control_latency(bench, 40))
    print(
        f"control (steer update -> holding worker -> answered): p50 "
        f"{statistics.median(latency) * 1000:.0f} ms, p95 "
        f"{latency[int(len(latency) * 0.95) - 1] * 1000:.0f} ms, max "
        f"{latency[-1] * 1000:.0f} ms over {len(latency)}"
    )
    await _failover_round(bench)


async def _failover_round(bench: Bench) -> None:
    gap = await failover(bench)
    print(
        f"failover: SIGKILL -> successor's first event {gap:.1f} s "
        f"(heartbeat timeout {HEARTBEAT_S:g} s; target <= {HEARTBEAT_S + 2:g} s)"
    )


def _remove(root: Path, quota: Path) -> None:
    """Delete the bench's dir: quotas released first (a worker killed mid-run, or by an
    interrupt, left its own mounted), then whatever is still mounted below it unmounted, so
    rmtree never deletes through a mount (an image, a worktree bind)."""
    for owner in quota.glob("owner-*"):  # one dir per data dir (quota.owner_root)
        sweep_stale(owner)
    prefix = f"{root}/"
    points = [line.split(" ")[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((p for p in points if p.startswith(prefix)), reverse=True):
        print(f"unmounting a leftover mount: {point}")
        subprocess.run(["umount", "-l", point], check=False)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--burst", type=int, default=6)
    parser.add_argument("--failover-only", action="store_true", help="only the failover round")
    parser.add_argument("--control-rounds", type=int, default=20)
    parser.add_argument(
        "--only-control", action="store_true", help="only the [control] lines (through the API)"
    )
    args = parser.parse_args()
    asyncio.run(
        main(args.runs, args.burst, args.failover_only, args.control_rounds, args.only_control)
    )
