"""The cost of confining a run's host children (issue 31): the same host git steps spawned
plainly, under a run's host work without a cgroup (process group + RLIMIT_CPU), and in the
run's cgroup, interleaved in one process; plus the per-run cgroup set-up and removal.

    uv run python benchmarks/hostwork_bench.py [--steps 200] [--rounds 5]

Prints per-step medians (wall and the host's own CPU) and the per-run set-up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from synthorg.hostwork import HostBudget, HostWork, working_for
from synthorg.sandbox.hostcgroup import confine, describe
from synthorg.workspace.git import run_git

_BUDGET = HostBudget(cpu_s=1e6, wall_s=600)


def _repo(root: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for i in range(100):
        (root / f"f{i}.txt").write_text(f"{i}\n")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "b"],
        check=True,
    )
    return root


async def _steps(
    repo: Path, n: int, context: Callable[[], AbstractContextManager[object]]
) -> tuple[float, float]:
    """(wall ms, host CPU ms) per step: `git status --porcelain` n times."""
    cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    with context():
        for _ in range(n):
            await run_git(["status", "--porcelain"], repo)
    wall = time.perf_counter() - wall0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    return wall * 1000 / n, cpu * 1000 / n


async def main(steps: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = _repo(Path(tmp) / "r")
        cgroup = confine("conv-bench", 1.0)
        modes: dict[str, Callable[[], AbstractContextManager[object]]] = {
            "plain (no run)": nullcontext,
            "run, no cgroup": lambda: working_for(HostWork(_BUDGET)),
        }
        if cgroup is not None:
            modes["run, cgroup"] = lambda: working_for(HostWork(_BUDGET, cgroup))
        found: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
        await _steps(repo, 20, nullcontext)  # warm
        for _ in range(rounds):
            for mode, context in modes.items():  # interleaved: the load hits all alike
                found[mode].append(await _steps(repo, steps, context))
        setups = []
        for _ in range(50):
            t0 = time.perf_counter()
            made = confine("conv-bench-setup", 1.0)
            if made is not None:
                made.close()
            setups.append((time.perf_counter() - t0) * 1000)
        if cgroup is not None:
            cgroup.close()
    print(f"confinement here: {describe()}; load average {os.getloadavg()[0]:.1f}")
    base = statistics.median(w for w, _ in found["plain (no run)"])
    for mode, samples in found.items():
        wall = statistics.median(w for w, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        print(
            f"{mode:16} {wall:7.3f} ms/step wall ({wall - base:+.3f}), {cpu:6.3f} ms/step host CPU"
        )
    print(f"per run: cgroup made and removed in {statistics.median(setups):.3f} ms (p50 of 50)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.steps, args.rounds))
