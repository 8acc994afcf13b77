"""Sandbox start-up cost, protections on vs off, measured in the same run.

Run: uv run python benchmarks/sandbox_bench.py [--starts 200]

Every configuration starts the same program through asyncio with stdin/stdout/stderr pipes
and writes the first (run-spec) line; configurations are interleaved start by start so
machine load hits all of them alike. Two measures:

- start-to-exit of ``/bin/true``: from ``stream()`` until the context manager has exited
  (sandbox torn down, everything reaped). Target: overhead over a plain subprocess
  <= 15 ms at p50 without cgroups, with the new protections (uid drop, seccomp).
- start-to-first-line of ``/bin/echo ready`` (what a run waits for before its first event).

Configurations: a plain subprocess (baseline); bwrap as before issue 12 (host root inside,
no seccomp); each protection alone; all of them; all of them plus per-run cgroups; all plus
neutral views (a state dir renamed for the run and a runtime dir bound from its hard-link
view, as an OpenHands run has: what keeps mountinfo free of host paths); all plus the
worktree quota (a loop-mounted ext4 made and removed per sandbox).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog

from synthorg.sandbox import BwrapSandbox, SandboxLimits, SandboxRequest
from synthorg.sandbox.identity import IdentityMode, resolve_identity
from synthorg.sandbox.process import STREAM_LIMIT

TARGET_MS = 15.0
VIEWS = "default + state dir + runtime bind (views)"
Timer = Callable[[], Awaitable[tuple[float, float]]]


async def plain(argv: list[str], cwd: Path) -> tuple[float, float]:
    """(first line or exit, full exit) of a plain subprocess."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=STREAM_LIMIT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"{}\n")
    await proc.stdout.readline()
    first = time.perf_counter() - started
    await proc.communicate()
    return first, time.perf_counter() - started


async def boxed(sandbox: BwrapSandbox, request: SandboxRequest) -> tuple[float, float]:
    """(first line or exit, full teardown) through BwrapSandbox.stream()."""
    started = time.perf_counter()
    first = 0.0
    async with sandbox.stream(request, "{}") as proc:
        async for _ in proc:
            first = time.perf_counter() - started
            break
        async for _ in proc:
            pass
    total = time.perf_counter() - started
    return first or total, total


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


async def measure(timers: dict[str, Timer], starts: int) -> dict[str, tuple[list[float], ...]]:
    firsts: dict[str, list[float]] = {name: [] for name in timers}
    totals: dict[str, list[float]] = {name: [] for name in timers}
    for timer in timers.values():  # warm caches everywhere
        for _ in range(3):
            await timer()
    for _ in range(starts):
        for name, timer in timers.items():
            first, total = await timer()
            firsts[name].append(first)
            totals[name].append(total)
    return {name: (firsts[name], totals[name]) for name in timers}


def report(title: str, results: dict[str, tuple[list[float], ...]], use_total: bool) -> None:
    index = 1 if use_total else 0
    base = pct(results["plain subprocess"][index], 0.5)
    print(f"\n{title}")
    print(f"  {'configuration':<44} {'p50':>8} {'p99':>8} {'overhead p50':>13} {'ratio':>6}")
    for name, values in results.items():
        p50, p99 = pct(values[index], 0.5), pct(values[index], 0.99)
        print(f"  {name:<44} {p50:7.2f}ms {p99:7.2f}ms {p50 - base:+12.2f}ms {p50 / base:5.2f}x")


async def main() -> int:
    # Only the tables: one debug line per sandbox start would bury them.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=200)
    args = parser.parse_args()
    dropped = resolve_identity()
    as_root = resolve_identity("", allow_root=True)
    if dropped.mode is not IdentityMode.DROPPED:
        print("run as root with the synthorg-sandbox user (scripts/bootstrap.sh)")
        return 2
    configs = {
        "before issue 12 (root inside, no seccomp)": BwrapSandbox(
            identity=as_root, seccomp=False, cgroups=False
        ),
        "+ uid drop": BwrapSandbox(identity=dropped, seccomp=False, cgroups=False),
        "+ seccomp": BwrapSandbox(identity=as_root, seccomp=True, cgroups=False),
        "uid drop + seccomp (default, no cgroups)": BwrapSandbox(cgroups=False),
        "uid drop + seccomp + cgroups": BwrapSandbox(),
    }
    quota = BwrapSandbox()
    print(
        f"cgroups: {quota.cgroups.detail}; quota: {quota.quota_unavailable or 'available'}; "
        f"load average {os.getloadavg()} on {os.cpu_count()} cpus"
    )
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        ws = Path(tmp) / "worktree"
        runtime = Path(tmp) / "runtime"
        for sub in ("bin", "lib/pkg"):
            (runtime / sub).mkdir(parents=True)
            for i in range(50):
                (runtime / sub / f"f{i}.py").write_text("x = 1\n")
        ws.mkdir()
        for label, argv, use_total in (
            ("/bin/true start-to-exit (sandbox torn down)", ["/bin/true"], True),
            ("/bin/echo ready start-to-first-line", ["/bin/echo", "ready"], False),
        ):
            off = SandboxLimits(disk_bytes=None)
            request = SandboxRequest(argv=argv, workspace=ws, limits=off, conversation_id="b")
            with_quota = request.model_copy(update={"limits": SandboxLimits()})
            with_views = request.model_copy(
                update={"state_dir": Path(tmp) / "state" / "conv", "runtime_binds": [runtime]}
            )
            timers: dict[str, Timer] = {"plain subprocess": lambda a=argv: plain(a, ws)}
            for name, sandbox in configs.items():
                timers[name] = lambda s=sandbox, r=request: boxed(s, r)
            default = configs["uid drop + seccomp (default, no cgroups)"]
            timers[VIEWS] = lambda s=default, r=with_views: boxed(s, r)
            results = await measure(timers, args.starts)
            quota_results = await measure(
                {
                    "plain subprocess": lambda a=argv: plain(a, ws),
                    "all + cgroups + worktree quota": lambda r=with_quota: boxed(quota, r),
                },
                max(args.starts // 10, 10),
            )
            results["all + cgroups + worktree quota"] = quota_results[
                "all + cgroups + worktree quota"
            ]
            report(f"{label} ({args.starts} starts each, interleaved)", results, use_total)
            if use_total:
                base = pct(results["plain subprocess"][1], 0.5)
                hardened = pct(results["uid drop + seccomp (default, no cgroups)"][1], 0.5)
                verdict = "PASS" if hardened - base <= TARGET_MS else "FAIL"
                print(f"  target: hardened overhead <= {TARGET_MS} ms p50, no cgroups: {verdict}")
    print(f"\nload average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
