"""N concurrent tool-using conversations: `synthorg serve` vs OpenHands' agent-server.

    uv run python benchmarks/conversations_vs_agent_server_bench.py [--conversations 32]
        [--rounds 2] [--venv ~/.cache/synthorg-bench/agent-server]

The same fake model serves both: ``synthorg.gateway.scripted_server`` (an OpenAI-compatible
upstream, its own process, counted on neither side) answering with the demo's fix script,
which reads the observations it gets: run the tests, view calc.py, fix the operator, run the
tests again, finish (5 model turns, 2 commands, 2 file-editor calls per conversation). Each
conversation gets its own copy of the demo repository. SynthOrg: a real ``synthorg serve``
(SQLite, bwrap sandbox, react loop, worktree, checkpoints, commit gate) with an ``openai``
provider pointing at the fake; each conversation is POSTed and done when it is no longer
active, finished, with a landed commit. OpenHands: ``agent-server`` 1.58.2 from its own venv
(installed once, as ``server_vs_agent_server_bench.py`` does; ``OH_MAX_CONCURRENT_RUNS`` raised
past N, auto-titling off so both sides make the same model calls), agent with the terminal
and file-editor tools and the LLM at the fake; done at ``execution_status`` finished with
calc.py fixed in its workspace; its commands find the ``python3`` the sandbox shows ours (the
host's base interpreter, without pytest: the demo's test command runs unittest on both
sides) (one that ends otherwise is counted as not finished and
reported; the wall time is until every conversation has ended either way).

Per side and round: wall time from the first POST until all N are done, and the peak over
samples (every ~0.5 s) of the whole process tree's USS and RSS: the server and every
descendant, plus processes that left the tree but carry the round's marker variable
(OpenHands' tmux servers daemonise). Before the measured batch each server runs one
conversation alone (first-use imports on both sides). The sides alternate; medians over
rounds; ratios are SynthOrg / OpenHands.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
from server_vs_agent_server_bench import ensure_peer, free_port, peer, spawn_group, stop_group

from synthorg.sandbox.bwrap import host_python_dir
from synthorg.server import KeyStore, Role
from synthorg.service.demo import DEMO_TASK, create_demo_repo

MIB = 2**20
MODEL = "fake-demo"
SCRIPT = "synthorg.engine.native.scripts:demo_fix_script"
MARKER = "SYNTHORG_BENCH_TREE"
POLL_S = 1.0  # each side is polled alike; 32 clients at 1 s are light for either server
FIXED = "return a - b"  # calc.py's subtract, once the script has fixed the operator


class TreeSampler:
    """Peak USS and RSS of a process tree, sampled on a thread until stopped."""

    def __init__(self, root: int, marker: str, every_s: float = 0.5) -> None:
        self.root, self.marker, self.every_s = root, marker, every_s
        self.peak_uss = self.peak_rss = 0
        self.peak_procs = 0
        self.peak_by_name: dict[str, float] = {}
        self._adopted: set[int] = set()
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _members(self) -> list[psutil.Process]:
        for proc in psutil.process_iter():  # marked processes that left the tree
            if proc.pid in self._seen:
                continue
            self._seen.add(proc.pid)
            with contextlib.suppress(psutil.Error):
                if proc.environ().get(MARKER) == self.marker:
                    self._adopted.add(proc.pid)
        roots = [self.root, *self._adopted]
        members: dict[int, psutil.Process] = {}
        for pid in roots:
            with contextlib.suppress(psutil.Error):
                top = psutil.Process(pid)
                for proc in [top, *top.children(recursive=True)]:
                    members[proc.pid] = proc
        return list(members.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            uss = rss = 0
            by_name: dict[str, float] = {}
            members = self._members()
            for proc in members:
                with contextlib.suppress(psutil.Error):
                    mem = proc.memory_full_info()
                    uss += mem.uss
                    rss += mem.rss
                    name = proc.name()
                    by_name[name] = by_name.get(name, 0) + mem.uss / MIB
            if uss > self.peak_uss:
                self.peak_uss, self.peak_rss, self.peak_procs = uss, rss, len(members)
                self.peak_by_name = {k: round(v, 1) for k, v in sorted(by_name.items())}
            self._stop.wait(self.every_s)


async def until_ok(url: str, proc: subprocess.Popen[bytes], limit_s: float = 180) -> None:
    deadline = time.monotonic() + limit_s
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"{url}: the server exited ({proc.returncode})")
            with contextlib.suppress(httpx.TransportError):
                if (await client.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise SystemExit(f"{url} not ready within {limit_s} s")


async def until_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit(f"the fake model exited ({proc.returncode})")
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        await asyncio.sleep(0.05)
    raise SystemExit("the fake model never listened")


async def _poll(api: httpx.AsyncClient, path: str) -> dict[str, Any]:
    """GET path; a keep-alive connection the server closed while this waited for a core (load
    60+ on 2 cores) is retried on a new one."""
    for _ in range(5):
        with contextlib.suppress(httpx.TransportError):
            body: dict[str, Any] = (await api.get(path)).json()
            return body
        await asyncio.sleep(POLL_S)
    raise SystemExit(f"{path}: the server stopped answering")


async def _gather_done(n: int, one: Callable[[int], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - started


async def synthorg_round(scratch: Path, model_url: str, n: int, marker: str) -> dict[str, Any]:
    home = scratch / "synthorg-home"
    repos = scratch / "repos"
    config = scratch / "synthorg.toml"
    config.write_text(
        f'[[gateway.providers]]\nname = "fake"\nkind = "openai"\nbase_url = "{model_url}"\n'
        f'models = ["{MODEL}"]\n[gateway.prices]\n[run]\nmodel = "{MODEL}"\n'
        f'[sandbox]\nbackend = "bwrap"\n[server]\nrepository_roots = ["{repos}"]\n'
    )
    paths = [create_demo_repo(repos / f"calc-{i}") for i in range(n + 1)]
    key = KeyStore(home / "server" / "keys.json").create("bench", {Role.OPERATOR})[1]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update({"SYNTHORG_HOME": str(home), MARKER: marker})
    command = [sys.executable, "-m", "synthorg.cli.app", "serve", "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "-c", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        await until_ok(f"{url}/ready", proc)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as api:

            async def one(i: int) -> None:
                body = {"repository": str(paths[i]), "prompt": DEMO_TASK, "loop": "react"}
                created = await api.post("/api/conversations", json=body)
                assert created.status_code == 201, created.text
                cid = created.json()["id"]
                while True:
                    view = await _poll(api, f"/api/conversations/{cid}")
                    if not view["active"] and view["status"] not in ("created", "running"):
                        assert view["status"] == "finished" and view["commit_sha"], view
                        return
                    await asyncio.sleep(POLL_S)

            await one(n)  # warm-up (first-use imports), not counted
            with TreeSampler(proc.pid, marker) as sampler:
                wall = await _gather_done(n, one)
    finally:
        stop_group(proc)
    return _figures(wall, sampler)


def openhands_command(
    exe: Path, scratch: Path, n: int, marker: str
) -> tuple[list[str], dict[str, str], int]:
    """agent-server's command, environment and port for ``n`` conversations at once."""
    command, env, port = peer(exe, scratch)
    tmux = scratch / "tmux"
    tmux.mkdir(mode=0o700)
    env.update({"OH_MAX_CONCURRENT_RUNS": str(2 * n), "TMUX_TMPDIR": str(tmux), MARKER: marker})
    # The agent's python3 is the interpreter our sandbox shows (no pytest: the demo's test
    # command then runs unittest on both sides), not this venv's, which has pytest.
    env["PATH"] = f"{host_python_dir()}/bin:/usr/local/bin:/usr/bin:/bin"
    return command, env, port


async def openhands_conversation(api: httpx.AsyncClient, model_url: str, repo: Path) -> str:
    """The demo task as one agent-server conversation in ``repo``, polled until it ends;
    ``""`` when it finished with calc.py fixed, else what went wrong."""
    llm = {
        "model": f"openai/{MODEL}",
        "base_url": model_url,
        "api_key": "unused",
        "num_retries": 0,
        "usage_id": "agent",
    }
    tools = [{"name": "terminal"}, {"name": "file_editor"}]
    body: dict[str, Any] = {
        "agent": {"kind": "Agent", "llm": llm, "tools": tools},
        "workspace": {"working_dir": str(repo)},
        "initial_message": {"role": "user", "content": [{"type": "text", "text": DEMO_TASK}]},
        "autotitle": False,
    }
    created = await api.post("/api/conversations", json=body)
    assert created.status_code in (200, 201), created.text
    cid = created.json()["id"]
    while True:
        view = await _poll(api, f"/api/conversations/{cid}")
        status = view.get("execution_status")
        if status in ("finished", "error", "stuck"):
            fixed = FIXED in (repo / "calc.py").read_text()
            return "" if status == "finished" and fixed else f"{cid}: {status}, fixed: {fixed}"
        await asyncio.sleep(POLL_S)


async def openhands_round(
    exe: Path, scratch: Path, model_url: str, n: int, marker: str
) -> dict[str, Any]:
    command, env, port = openhands_command(exe, scratch, n, marker)
    paths = [create_demo_repo(scratch / "repos" / f"calc-{i}") for i in range(n + 1)]
    proc = spawn_group(command, env)
    url = f"http://127.0.0.1:{port}"
    failed: list[str] = []
    try:
        await until_ok(f"{url}/health", proc)
        async with httpx.AsyncClient(base_url=url, timeout=600) as api:

            async def one(i: int) -> None:
                if failure := await openhands_conversation(api, model_url, paths[i]):
                    failed.append(failure)

            await one(n)  # warm-up (first-use imports), not counted
            failed.clear()
            with TreeSampler(proc.pid, marker) as sampler:
                wall = await _gather_done(n, one)
    finally:
        stop_group(proc)
        kill_marked(marker)  # its tmux servers outlive it
    # Reported, not fatal: the peer errs on a loaded machine (its LLM calls time out).
    return {**_figures(wall, sampler), "not_finished": len(failed), "failures": failed[:3]}


def kill_marked(marker: str) -> None:
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(MARKER) == marker:
                proc.kill()


def _figures(wall: float, sampler: TreeSampler) -> dict[str, Any]:
    return {
        "wall_s": wall,
        "peak_uss_mib": sampler.peak_uss / MIB,
        "peak_rss_mib": sampler.peak_rss / MIB,
        "processes": sampler.peak_procs,
        "uss_mib_by_name": sampler.peak_by_name,
    }


def fake_model(port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "synthorg.gateway.scripted_server", "--port", str(port),
         "--script", SCRIPT],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--venv", type=Path, default=Path.home() / ".cache" / "synthorg-bench" / "agent-server"
    )
    args = parser.parse_args()
    exe = ensure_peer(args.venv)
    port = free_port()
    fake = fake_model(port)
    model_url = f"http://127.0.0.1:{port}/v1"
    results: dict[str, list[dict[str, Any]]] = {"synthorg": [], "openhands": []}
    loads: list[float] = []
    try:
        await until_listening(port, fake)
        for _ in range(args.rounds):
            for side in ("synthorg", "openhands"):
                loads.append(os.getloadavg()[0])
                with tempfile.TemporaryDirectory(prefix=f"synthorg-conv-{side}-") as tmp:
                    marker = secrets.token_hex(8)
                    if side == "synthorg":
                        figures = await synthorg_round(
                            Path(tmp), model_url, args.conversations, marker
                        )
                    else:
                        figures = await openhands_round(
                            exe, Path(tmp), model_url, args.conversations, marker
                        )
                    shutil.rmtree(tmp, ignore_errors=True)
                results[side].append(figures)
                print(f"{side}: {json.dumps(figures)} (load {loads[-1]:.1f})", flush=True)
    finally:
        stop_group(fake)
    n = args.conversations
    print(f"{n} concurrent conversations, {args.rounds} rounds, load average {min(loads):.1f}-"
          f"{max(loads):.1f}")  # fmt: skip
    for key, label in (("wall_s", "wall s"), ("peak_uss_mib", "peak USS MiB"),
                       ("peak_rss_mib", "peak RSS MiB")):  # fmt: skip
        ours = statistics.median(r[key] for r in results["synthorg"])
        theirs = statistics.median(r[key] for r in results["openhands"])
        print(f"{label:>14}: synthorg {ours:8.1f}  openhands {theirs:8.1f}  -> "
              f"{ours / theirs:.2f}x")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
