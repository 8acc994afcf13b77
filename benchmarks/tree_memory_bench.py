"""Memory of the control plane's process tree with N concurrent governed runs, by role.

    uv run python benchmarks/tree_memory_bench.py [--conversations 32]

Boots the real stack in this process (SQLite store, embedded gateway serving the demo's
scripted model, bwrap sandbox with the toolbox, worktrees, checkpoints, the commit gate),
measures the idle tree, then starts ``--conversations`` demo runs at once and samples the
whole process tree every ~0.2 s until they have all finished. At the sample with the largest
total it reports, per role (this control-plane process, bwrap, the in-sandbox Python toolbox,
the launcher/forwarders, git, the agent's own commands), the process count, RSS and USS
(memory only that process holds: RSS double-counts shared libraries and the interpreter).
USS is the figure to shrink; RSS is what the issue's 674-690 MB was.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psutil

MIB = 2**20


def role_of(proc: psutil.Process, me: int) -> str:
    """Which part of the control plane a process is, from its name and command line."""
    if proc.pid == me:
        return "control plane (this process)"
    try:
        name, cmdline = proc.name(), " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "gone"
    if name == "bwrap":
        return "bwrap"
    if "toolbox.py" in cmdline:
        return "toolbox (python in the sandbox)"
    if "launcher" in cmdline or "--forward" in cmdline:
        return "launcher/forwarders"
    if name.startswith("git"):
        return "git"
    return f"agent commands ({name})" if name in ("sh", "bash", "python3") else f"other ({name})"


def sample(me: int) -> dict[str, tuple[int, int, int]]:
    """role -> (processes, RSS bytes, USS bytes) for the tree under ``me`` right now."""
    root = psutil.Process(me)
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for proc in [root, *root.children(recursive=True)]:
        try:
            mem = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        figures = out[role_of(proc, me)]
        figures[0] += 1
        figures[1] += mem.rss
        figures[2] += mem.uss
    return {role: (n, rss, uss) for role, (n, rss, uss) in out.items()}


class Sampler:
    """Samples the tree in a thread (so the event loop's own stalls do not skip samples)."""

    def __init__(self, me: int) -> None:
        self._me, self._stop = me, threading.Event()
        self.peak: dict[str, tuple[int, int, int]] = {}
        self.peak_processes = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            now = sample(self._me)
            if sum(r for _, r, _ in now.values()) > sum(r for _, r, _ in self.peak.values()):
                self.peak = now
            self.peak_processes = max(self.peak_processes, sum(n for n, _, _ in now.values()))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def show(title: str, figures: dict[str, tuple[int, int, int]]) -> None:
    print(title)
    print(f"  {'role':<34} {'procs':>5} {'RSS MiB':>9} {'USS MiB':>9}")
    for role, (n, rss, uss) in sorted(figures.items(), key=lambda kv: -kv[1][2]):
        print(f"  {role:<34} {n:>5} {rss / MIB:>9.1f} {uss / MIB:>9.1f}")
    n = sum(f[0] for f in figures.values())
    rss, uss = sum(f[1] for f in figures.values()), sum(f[2] for f in figures.values())
    print(f"  {'total':<34} {n:>5} {rss / MIB:>9.1f} {uss / MIB:>9.1f}")


async def bench(conversations: int, scratch: Path) -> None:
    from synthorg.cli.demo import NATIVE_DEMO_SCRIPT
    from synthorg.domain import Task
    from synthorg.domain.ids import new_id
    from synthorg.service.boot import boot
    from synthorg.service.demo import DEMO_TASK, create_demo_repo
    from synthorg.service.loops import default_provisioner, default_registry
    from synthorg.service.options import RunOptions
    from synthorg.settings import Settings

    model = "scripted-demo"
    provider = {"name": "scripted", "kind": "scripted", "models": [model]}
    settings = Settings(
        home=scratch / "home",
        sections={
            "gateway": {"providers": [{**provider, "script": NATIVE_DEMO_SCRIPT}], "prices": {}},
            "run": {"model": model},
            "sandbox": {"backend": "bwrap"},
        },
    )
    me = os.getpid()
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:

        async def one(i: int) -> Any:
            repo = create_demo_repo(scratch / f"calc-{i}")
            task = Task(
                id=new_id("task"), project_id="bench", prompt=DEMO_TASK, repository=str(repo)
            )
            record = await c.service.create(task, RunOptions())
            return await c.service.run(record.id)

        await one(-1)  # warms imports and caches
        show("idle (after one warm-up run)", sample(me))
        started = time.perf_counter()
        with Sampler(me) as sampler:
            results = await asyncio.gather(*(one(i) for i in range(conversations)))
        wall = time.perf_counter() - started
        landed = sum(1 for r in results if r.commit_sha is not None)
        show(f"peak of the tree with {conversations} concurrent runs", sampler.peak)
        print(
            f"{landed}/{conversations} landed in {wall:.1f} s; at most "
            f"{sampler.peak_processes} processes; load average {os.getloadavg()[0]:.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="synthorg-tree-memory-") as tmp:
        asyncio.run(bench(args.conversations, Path(tmp)))


if __name__ == "__main__":
    main()
