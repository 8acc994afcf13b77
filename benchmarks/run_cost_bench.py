"""Control-plane CPU per governed run, and its parts, against a baseline revision.

    uv run python benchmarks/run_cost_bench.py [--runs 8] [--rounds 3] [--baseline-rev 6681ac7]
        [--venv ~/.cache/synthorg-bench/agent-server] [--no-peer]

A worker process boots the real stack (SQLite store, embedded gateway serving the demo's
scripted model, bwrap sandbox with the toolbox, worktrees, checkpoints, the commit gate) and
runs the demo task (find the bug, fix it, run the tests) ``--runs`` times one after another.
The figure per run is the CPU (user + system) of the worker and of every child it reaped
(git, bwrap and what runs inside), from ``getrusage`` deltas around each run. The parts are
measured the same way on their own, on the same stack: worktree creation + removal, one
sandbox toolbox start + one command + stop, and one checkpoint after a one-file edit.

Nothing inside the bwrap sandbox reaches ``getrusage`` (its pid namespace's processes are not
reaped by the worker), so where cgroup v1's cpuacct is writable the worker also runs in a
cgroup of its own and reads its ``cpuacct.usage``: the whole tree's CPU, the sandbox's
included ("tree" figures). For a run that includes the agent's own commands (the demo's test
runs); for the sandbox part it is the in-sandbox toolbox's start and stop, the control
plane's share. "run + toolbox" is the host figure of a run plus the toolbox's in-sandbox CPU
(sandbox part: tree minus host).

The baseline is the same worker run from ``git archive <rev>`` (the same venv); workers of
both alternate ``--rounds`` times so machine load hits them alike. Medians; the ratio is
current / baseline.

The peer, in the same rounds: OpenHands' agent-server 1.58.2 (its venv made once by
``server_vs_agent_server_bench.ensure_peer``) runs the same demo task ``--runs`` times one
after another, its model the same fix script served by ``synthorg.gateway.scripted_server``
(its own process, not counted; ours runs in the worker's embedded gateway and is counted), as
``conversations_vs_agent_server_bench.py`` runs it 32 at once. The figure per run is the CPU
of agent-server's whole process tree (user + system, reaped children included) and of the
tmux servers it daemonises, from ``psutil`` deltas around each conversation: its agent's
commands run on the host, so this is its "tree" figure, to be read against our "run tree"
(or "run + toolbox" where cpuacct is not writable). It does less per run: no worktree, no
sandbox, no checkpoints, no commit gate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from baseline import extract_src

ROOT = Path(__file__).resolve().parents[1]


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class TreeCpu:
    """CPU of this process and all its descendants, sandboxes included (cgroup v1 cpuacct)."""

    def __init__(self) -> None:
        self.usage: Path | None = None
        base = Path("/sys/fs/cgroup/cpuacct")
        own = [
            line.split(":", 2)[2]
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if "cpuacct" in line.split(":", 2)[1].split(",")
        ]
        if not own or not os.access(base, os.W_OK):
            return
        group = base / own[0].lstrip("/") / f"synthorg-run-cost-{os.getpid()}"
        try:
            group.mkdir()
            (group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            return
        self.usage = group / "cpuacct.usage"

    def seconds(self) -> float | None:
        return None if self.usage is None else int(self.usage.read_text()) / 1e9

    def close(self) -> None:
        """Back to the parent cgroup, and the (then empty) group removed."""
        if self.usage is not None:
            (self.usage.parent.parent / "cgroup.procs").write_text(str(os.getpid()))
            # A child still ending (a git, a sandbox's last process) keeps the group busy for
            # a while on a loaded machine: wait for it to empty, bounded.
            procs, deadline = self.usage.parent / "cgroup.procs", time.monotonic() + 60
            while procs.read_text().strip() and time.monotonic() < deadline:
                time.sleep(0.1)  # a poll interval: cgroups v1 has no wake-up on empty
            with contextlib.suppress(OSError):  # still busy: left behind, named by pid
                self.usage.parent.rmdir()


async def _cpu_of(
    action: Callable[[], Awaitable[Any]], tree: TreeCpu, figures: dict[str, list[float]], part: str
) -> float:
    before, tree_before = _cpu(), tree.seconds()
    await action()
    spent = _cpu() - before
    tree_after = tree.seconds()
    if tree_before is not None and tree_after is not None:
        figures.setdefault(f"{part} tree", []).append(tree_after - tree_before)
    return spent


async def _worker(runs: int, scratch: Path) -> dict[str, list[float]]:
    from synthorg.cli.demo import NATIVE_DEMO_SCRIPT
    from synthorg.domain import Task
    from synthorg.domain.ids import new_id
    from synthorg.sandbox import SandboxRequest, ToolboxClient
    from synthorg.service.boot import boot
    from synthorg.service.demo import DEMO_TASK, create_demo_repo
    from synthorg.service.loops import default_provisioner, default_registry
    from synthorg.service.options import RunOptions
    from synthorg.settings import Settings

    model = "scripted-demo"
    settings = Settings(
        home=scratch / "home",
        sections={
            "gateway": {
                "providers": [
                    {
                        "name": "scripted",
                        "kind": "scripted",
                        "models": [model],
                        "script": NATIVE_DEMO_SCRIPT,
                    }
                ],
                "prices": {},
            },
            "run": {"model": model},
            "sandbox": {"backend": "bwrap"},
        },
    )
    figures: dict[str, list[float]] = {"run": [], "worktree": [], "sandbox": [], "checkpoint": []}
    tree = TreeCpu()
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        for i in range(runs + 1):
            repo = create_demo_repo(scratch / f"calc-{i}")
            task = Task(
                id=new_id("task"), project_id="bench", prompt=DEMO_TASK, repository=str(repo)
            )
            landed: list[Any] = []

            async def run(task: Task = task, landed: list[Any] = landed) -> None:
                record = await c.service.create(task, RunOptions())
                landed.append(await c.service.run(record.id))

            counted = figures if i else {}  # the first run warms imports and caches
            spent = await _cpu_of(run, tree, counted, "run")
            if landed[0].commit_sha is None:  # the demo fix lands a commit; else it failed
                raise SystemExit(f"run {i} landed nothing: {landed[0]}")
            if i:
                figures["run"].append(spent)

        for i in range(runs):
            repo = create_demo_repo(scratch / f"parts-{i}")
            conversation = new_id("conv")
            holder: list[Any] = []

            async def create(
                repo: Path = repo, conversation: str = conversation, holder: list[Any] = holder
            ) -> None:
                holder.append(await c.worktrees.create(repo, conversation))

            made = await _cpu_of(create, tree, {}, "worktree")
            ws = holder[0]
            (ws.path / "calc.py").write_text((ws.path / "calc.py").read_text() + "\n# edited\n")

            async def checkpoint(ws: Any = ws, conversation: str = conversation) -> None:
                await c.checkpoints.create(ws, conversation)

            figures["checkpoint"].append(await _cpu_of(checkpoint, tree, {}, "checkpoint"))

            async def sandbox(ws: Any = ws, conversation: str = conversation) -> None:
                request = SandboxRequest(
                    argv=c.sandbox.toolbox_argv(),
                    workspace=ws.path,
                    limits=c.sandbox_settings.limits,
                    conversation_id=conversation,
                )
                async with ToolboxClient(c.sandbox, request) as toolbox:
                    await toolbox.run("true", timeout_s=60)

            figures["sandbox"].append(await _cpu_of(sandbox, tree, figures, "sandbox"))

            async def remove(ws: Any = ws) -> None:
                await c.worktrees.remove(ws, delete_branch=True)

            figures["worktree"].append(made + await _cpu_of(remove, tree, {}, "worktree"))
    tree.close()
    if "sandbox tree" in figures:  # the toolbox's in-sandbox CPU, added to each run's host CPU
        toolbox = statistics.median(
            t - h for t, h in zip(figures["sandbox tree"], figures["sandbox"], strict=True)
        )
        figures["run + toolbox"] = [r + toolbox for r in figures["run"]]
    return figures


def _spawn_worker(src: Path, runs: int) -> dict[str, list[float]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env["PYTHONPATH"] = str(src)
    done = subprocess.run(
        [sys.executable, __file__, "--worker", "--runs", str(runs)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"worker on {src} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _tree_cpu(root: int, marker: str) -> float:
    """CPU seconds of ``root``'s process tree and of the processes carrying ``marker``, each
    with its reaped children: a child that ended between two readings is in its parent's."""
    import psutil
    from conversations_vs_agent_server_bench import MARKER

    members: dict[int, psutil.Process] = {}
    tops = [psutil.Process(root)]
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(MARKER) == marker:
                tops.append(proc)
    for top in tops:
        with contextlib.suppress(psutil.Error):
            for proc in [top, *top.children(recursive=True)]:
                members[proc.pid] = proc
    total = 0.0
    for proc in members.values():
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


async def _peer_runs(exe: Path, runs: int) -> list[float]:
    """CPU seconds per demo-task conversation of agent-server (the first, warming its imports
    and caches, not counted)."""
    import httpx
    from conversations_vs_agent_server_bench import (
        fake_model,
        kill_marked,
        openhands_command,
        openhands_conversation,
        until_listening,
        until_ok,
    )
    from server_vs_agent_server_bench import spawn_group, stop_group

    from support import free_port
    from synthorg.service.demo import create_demo_repo

    spent: list[float] = []
    with tempfile.TemporaryDirectory(prefix="synthorg-run-cost-peer-") as tmp:
        scratch, model_port, marker = Path(tmp), free_port(), secrets.token_hex(8)
        fake = fake_model(model_port)
        try:
            await until_listening(model_port, fake)
            command, env, port = openhands_command(exe, scratch, 1, marker)
            server = spawn_group(command, env)
            try:
                url = f"http://127.0.0.1:{port}"
                await until_ok(f"{url}/ready", server)
                async with httpx.AsyncClient(base_url=url, timeout=600) as api:
                    for i in range(runs + 1):
                        repo = create_demo_repo(scratch / "repos" / f"calc-{i}")
                        before = _tree_cpu(server.pid, marker)
                        model_url = f"http://127.0.0.1:{model_port}/v1"
                        if failure := await openhands_conversation(api, model_url, repo):
                            raise SystemExit(f"agent-server run {i}: {failure}")
                        if i:
                            spent.append(_tree_cpu(server.pid, marker) - before)
            finally:
                stop_group(server)
                kill_marked(marker)  # its tmux servers outlive it
        finally:
            stop_group(fake)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-rev", default="6681ac7")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--venv", type=Path, default=Path.home() / ".cache" / "synthorg-bench" / "agent-server"
    )
    parser.add_argument("--no-peer", action="store_true", help="leave agent-server out")
    args = parser.parse_args()
    if args.worker:
        with tempfile.TemporaryDirectory(prefix="synthorg-run-cost-") as tmp:
            print(json.dumps(asyncio.run(_worker(args.runs, Path(tmp)))))
        return

    from server_vs_agent_server_bench import ensure_peer

    exe = None if args.no_peer else ensure_peer(args.venv)
    peer: list[float] = []
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="synthorg-run-cost-base-") as tmp:
        variants = {"current": ROOT / "src", "baseline": extract_src(args.baseline_rev, Path(tmp))}
        merged: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
        for _ in range(args.rounds):
            for name, src in variants.items():
                for part, values in _spawn_worker(src, args.runs).items():
                    merged[name].setdefault(part, []).extend(values)
            if exe is not None:
                peer.extend(asyncio.run(_peer_runs(exe, args.runs)))
            loads.append(os.getloadavg()[0])
    runs = f"{args.rounds} rounds x {args.runs} runs"
    print(f"{runs}, load average {min(loads):.1f}-{max(loads):.1f}, baseline {args.baseline_rev}")
    parts = ("run", "run + toolbox", "run tree", "worktree", "sandbox", "sandbox tree")
    for part in (*parts, "checkpoint"):
        if part not in merged["current"] or part not in merged["baseline"]:
            continue  # no writable cpuacct here: host figures only
        now = statistics.median(merged["current"][part])
        before = statistics.median(merged["baseline"][part])
        print(
            f"{part:>13}: {now * 1000:6.1f} ms CPU vs {before * 1000:6.1f} ms at the baseline "
            f"-> {now / before:.2f}x"
        )
    if peer:
        theirs = statistics.median(peer)
        ours = "run tree" if "run tree" in merged["current"] else "run + toolbox"
        ours = ours if ours in merged["current"] else "run"
        now = statistics.median(merged["current"][ours])
        print(
            f"agent-server 1.58.2, the same task, whole tree: {theirs * 1000:6.1f} ms CPU per run; "
            f"{ours} {now * 1000:.1f} ms -> {now / theirs:.2f}x"
        )
    else:
        print("agent-server: left out (--no-peer)")


if __name__ == "__main__":
    main()
