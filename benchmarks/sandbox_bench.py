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
worktree quota, held (per sandbox start: sandboxes of one process on one worktree share one
quota, so a start with it already mounted pays only for sharing it).

The quota's own cost is paid once per run (each run starts one sandbox today): making the
image (mkfs copying the tree in), mounting it, and at the end copying back what changed and
unmounting. It is measured apart, mount and release, on an empty worktree and on a checkout
of this repository with one same-size edit, for this tree's quota.py and the baseline
revision's (--baseline, loaded from git in the same run).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType

import structlog
from baseline import ROOT, extract_src

from synthorg.sandbox import BwrapSandbox, SandboxLimits, SandboxRequest, quota
from synthorg.sandbox.identity import IdentityMode, resolve_identity
from synthorg.sandbox.process import STREAM_LIMIT

TARGET_MS = 15.0
VIEWS = "default + state dir + runtime bind (views)"
HELD = "default + worktree quota held (views off)"
BASELINE_REV = "1353ea2"  # main before the changed-only copy-back
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
    parser.add_argument("--runs", type=int, default=20, help="quota mount/release rounds")
    parser.add_argument("--baseline", default=BASELINE_REV, help="revision for quota.py")
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
    quota_sandbox = BwrapSandbox()
    print(
        f"cgroups: {quota_sandbox.cgroups.detail}; "
        f"quota: {quota_sandbox.quota_unavailable or 'available'}; "
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
            held = None
            if default.quota_unavailable is None:  # shared by every start below (refcount)
                held = quota.WorkspaceQuota.mount(ws, SandboxLimits().disk_bytes or 0)
                timers[HELD] = lambda s=default, r=with_quota: boxed(s, r)
            try:
                results = await measure(timers, args.starts)
            finally:
                if held is not None:
                    held.release()
            report(f"{label} ({args.starts} starts each, interleaved)", results, use_total)
            if use_total:
                base = pct(results["plain subprocess"][1], 0.5)
                before = pct(results["before issue 12 (root inside, no seccomp)"][1], 0.5)
                for name in ("uid drop + seccomp (default, no cgroups)", HELD):
                    if name in results:
                        p50 = pct(results[name][1], 0.5)
                        verdict = "PASS" if p50 - before <= TARGET_MS else "FAIL"
                        print(f"  target <= {TARGET_MS} ms p50 over bwrap before issue 12, "
                              f"{name}: {p50 - before:+.2f} ms {verdict} "
                              f"(over a plain subprocess: {p50 - base:+.2f} ms)")  # fmt: skip
        if quota_sandbox.quota_unavailable is None:
            await asyncio.to_thread(quota_per_run, Path(tmp), args.baseline, args.runs)
    print(f"\nload average at the end {os.getloadavg()}")
    return 0


def load_quota(rev: str, into: Path) -> ModuleType:
    """The baseline revision's quota.py, imported beside this tree's (its own _HELD)."""
    path = extract_src(rev, into) / "synthorg" / "sandbox" / "quota.py"
    spec = importlib.util.spec_from_file_location("baseline_quota", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def quota_per_run(tmp: Path, rev: str, runs: int) -> None:
    """Mount and release of a run's quota (once per run), this tree's vs the baseline's."""
    impls = {"this tree": quota, f"baseline {rev}": load_quota(rev, tmp / "baseline")}
    checkout = tmp / "checkout"
    checkout.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"],
                             capture_output=True, check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive, check=True)
    files = sum(len(f) for _, _, f in os.walk(checkout))
    empty = tmp / "empty"
    empty.mkdir()
    allowance = SandboxLimits().disk_bytes or 0
    print(f"\nworktree quota, once per run ({runs} runs each, interleaved): "
          "mount (mkfs copies the tree in) and release (copy back, unmount)")  # fmt: skip
    print(f"  {'worktree':<28} {'quota.py':<18} {'mount p50':>10} {'release p50':>12} "
          f"{'total p50':>10} {'ratio':>6}")  # fmt: skip
    for label, tree in (("empty", empty), (f"this repo ({files} files)", checkout)):
        edited = tree / "pyproject.toml" if (tree / "pyproject.toml").exists() else None
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in impls}
        for _ in range(runs):
            for name, impl in impls.items():
                started = time.perf_counter()
                held = impl.WorkspaceQuota.mount(tree, allowance)
                mounted = time.perf_counter()
                if edited is not None:  # one same-size edit, as a run's fix would be
                    text = edited.read_bytes()
                    edited.write_bytes(text.swapcase())
                held.release()
                released = time.perf_counter()
                if edited is not None:
                    assert edited.read_bytes() == text.swapcase(), "the edit did not come back"
                times[name].append((mounted - started, released - mounted))
        totals = {name: pct([m + r for m, r in t], 0.5) for name, t in times.items()}
        base = totals[f"baseline {rev}"]
        for name, t in times.items():
            mount_p50 = pct([m for m, _ in t], 0.5)
            release_p50 = pct([r for _, r in t], 0.5)
            print(f"  {label:<28} {name:<18} {mount_p50:8.1f}ms {release_p50:10.1f}ms "
                  f"{totals[name]:8.1f}ms {totals[name] / base:5.2f}x")  # fmt: skip


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
