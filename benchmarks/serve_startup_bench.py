"""``synthorg serve`` start-up: spawn to the first 200 of ``/ready``, against a baseline revision.

    uv run python benchmarks/serve_startup_bench.py [--rounds 7] [--baseline-rev 6681ac7]

Each round spawns ``python -m synthorg.cli.app serve --port P`` with a fresh data dir
(SQLite store) and polls ``GET /ready`` every 10 ms until it answers 200; the figure is the
time from spawn to that answer. The baseline is the same server at ``--baseline-rev``
(extracted with ``git archive``, run from the same venv), rounds interleaved so machine load
hits both alike; ``python -c pass`` is printed as the floor. Medians of the wall time and of
the server's CPU time at that moment (the better guide on a loaded machine); the ratio is
current / baseline. A second, warm start in the same data dir is measured too (what a restart
pays: the data dir, keys and store schema exist).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from baseline import bytecode_env, extract_src

from support import free_port

ROOT = Path(__file__).resolve().parents[1]
_DEADLINE_S = 120.0


def _to_ready(src: Path, home: Path, *, bytecode: bool) -> tuple[float, float]:
    """(Seconds from spawning ``synthorg serve`` to its first ``/ready`` 200, the server's
    CPU seconds by then): CPU barely depends on machine load, wall time does."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(SYNTHORG_HOME=str(home), PYTHONPATH=str(src))
    env = bytecode_env(env, home.parent / "pycache", enabled=bytecode)
    command = [sys.executable, "-m", "synthorg.cli.app", "serve", "--port", str(port)]
    url = f"http://127.0.0.1:{port}/ready"
    started = time.perf_counter()
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        with httpx.Client(timeout=2.0) as client:
            while time.perf_counter() - started < _DEADLINE_S:
                if proc.poll() is not None:
                    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                    raise SystemExit(f"{src}: serve exited {proc.returncode}: {err[-2000:]}")
                try:
                    if client.get(url).status_code == 200:
                        wall = time.perf_counter() - started
                        cpu = psutil.Process(proc.pid).cpu_times()
                        return wall, cpu.user + cpu.system
                except httpx.TransportError:
                    pass
                time.sleep(0.01)  # a poll interval, not synchronisation
        raise SystemExit(f"{src}: /ready not 200 within {_DEADLINE_S} s")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _floor() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline-rev", default="6681ac7")
    parser.add_argument(
        "--no-bytecode", action="store_true", help="compile every module on every start"
    )
    args = parser.parse_args()
    bytecode = not args.no_bytecode

    with tempfile.TemporaryDirectory(prefix="synthorg-serve-bench-") as tmp:
        scratch = Path(tmp)
        variants = {"current": ROOT / "src", "baseline": extract_src(args.baseline_rev, scratch)}
        cold: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        warm: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        floor: list[float] = []
        for name, src in variants.items():  # fills the bytecode cache; not counted
            _to_ready(src, scratch / f"{name}-warm-up", bytecode=bytecode)
        for round_no in range(args.rounds):
            floor.append(_floor())
            for name, src in variants.items():
                home = scratch / f"{name}-{round_no}"
                cold[name].append(_to_ready(src, home, bytecode=bytecode))
                warm[name].append(_to_ready(src, home, bytecode=bytecode))
        load = os.getloadavg()[0]
        print(
            f"rounds {args.rounds}, load average {load:.1f}, baseline {args.baseline_rev}, "
            f"bytecode {'cached' if bytecode else 'off'}"
        )
        print(f"python -c pass: {statistics.median(floor) * 1000:.0f} ms")
        for label, figures in (("cold", cold), ("warm", warm)):
            for what, at in (("wall", 0), ("CPU", 1)):
                now = statistics.median(f[at] for f in figures["current"])
                before = statistics.median(f[at] for f in figures["baseline"])
                print(
                    f"serve -> /ready ({label}, {what}): {now:.2f} s vs {before:.2f} s at the "
                    f"baseline -> {now / before:.2f}x"
                )


if __name__ == "__main__":
    main()
