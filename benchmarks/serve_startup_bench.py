"""``synthorg serve`` start-up: spawn to the first 200 of ``/ready``, against a baseline revision
and against the peer, OpenHands' agent-server.

    uv run python benchmarks/serve_startup_bench.py [--rounds 7] [--baseline-rev 6681ac7]
        [--venv ~/.cache/synthorg-bench/agent-server] [--no-peer]

Each round spawns ``python -m synthorg.cli.app serve --port P`` with a fresh data dir
(SQLite store) and polls ``GET /ready`` every 10 ms until it answers 200; the figure is the
time from spawn to that answer. The baseline is the same server at ``--baseline-rev``
(extracted with ``git archive``, run from the same venv), rounds interleaved so machine load
hits both alike; ``python -c pass`` is printed as the floor. Medians of the wall time and of
the server's CPU time at that moment (the better guide on a loaded machine); the ratio is
current / baseline. A second, warm start in the same data dir is measured too (what a restart
pays: the data dir, keys and store schema exist).

The peer in the same rounds: ``agent-server`` 1.58.2 from its own venv (made once by
``server_vs_agent_server_bench.ensure_peer``: the OpenHands runtime venv the tests build has
the SDK but not the agent-server), spawn to the first 200 of its own ``/ready`` (503 until its
initialisation completes), cold with a fresh ``HOME`` and warm in the same one; the ratio is
SynthOrg / agent-server. Neither side's CPU counts children (neither starts any by then).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
from baseline import bytecode_env, extract_src
from server_vs_agent_server_bench import ensure_peer, peer, stop_group

from support import free_port

ROOT = Path(__file__).resolve().parents[1]
_DEADLINE_S = 600.0  # a first start on a machine at load 25 compiles for minutes


def _to_ready(
    command: list[str], env: dict[str, str], port: int, label: str
) -> tuple[float, float]:
    """(Seconds from spawning ``command`` to its first ``/ready`` 200, the server's CPU seconds
    by then): CPU barely depends on machine load, wall time does."""
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
                    raise SystemExit(f"{label}: exited {proc.returncode}: {err[-2000:]}")
                try:
                    if client.get(url).status_code == 200:
                        wall = time.perf_counter() - started
                        cpu = psutil.Process(proc.pid).cpu_times()
                        return wall, cpu.user + cpu.system
                except httpx.TransportError:
                    pass
                time.sleep(0.01)  # a poll interval, not synchronisation
        raise SystemExit(f"{label}: /ready not 200 within {_DEADLINE_S} s")
    finally:
        stop_group(proc)


def _synthorg(src: Path, home: Path, *, bytecode: bool) -> tuple[float, float]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(SYNTHORG_HOME=str(home), PYTHONPATH=str(src))
    env = bytecode_env(env, home.parent / "pycache", enabled=bytecode)
    command = [sys.executable, "-m", "synthorg.cli.app", "serve", "--port", str(port)]
    return _to_ready(command, env, port, str(src))


def _agent_server(exe: Path, home: Path) -> tuple[float, float]:
    command, env, port = peer(exe, home)  # its HOME and state dirs under ``home``
    return _to_ready(command, env, port, "agent-server")


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
    parser.add_argument(
        "--venv", type=Path, default=Path.home() / ".cache" / "synthorg-bench" / "agent-server"
    )
    parser.add_argument("--no-peer", action="store_true", help="leave agent-server out")
    args = parser.parse_args()
    bytecode = not args.no_bytecode
    exe = None if args.no_peer else ensure_peer(args.venv)

    with tempfile.TemporaryDirectory(prefix="synthorg-serve-bench-") as tmp:
        scratch = Path(tmp)
        old_src = extract_src(args.baseline_rev, scratch)
        variants: dict[str, Callable[[Path], tuple[float, float]]] = {
            "current": lambda home: _synthorg(ROOT / "src", home, bytecode=bytecode),
            "baseline": lambda home: _synthorg(old_src, home, bytecode=bytecode),
        }
        if exe is not None:
            variants["agent-server"] = lambda home: _agent_server(exe, home)
        cold: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        warm: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        floor: list[float] = []
        loads = [os.getloadavg()[0]]
        for name, start in variants.items():  # fills the bytecode caches; not counted
            start(scratch / f"{name}-warm-up")
        for round_no in range(args.rounds):
            floor.append(_floor())
            for name, start in variants.items():
                home = scratch / f"{name}-{round_no}"
                cold[name].append(start(home))
                warm[name].append(start(home))
            loads.append(os.getloadavg()[0])
        print(
            f"rounds {args.rounds}, load average {min(loads):.1f}-{max(loads):.1f}, baseline "
            f"{args.baseline_rev}, bytecode {'cached' if bytecode else 'off'}"
        )
        print(f"python -c pass: {statistics.median(floor) * 1000:.0f} ms")
        for label, figures in (("cold", cold), ("warm", warm)):
            for what, at in (("wall", 0), ("CPU", 1)):
                now = statistics.median(f[at] for f in figures["current"])
                before = statistics.median(f[at] for f in figures["baseline"])
                line = (
                    f"serve -> /ready ({label}, {what}): {now:.2f} s vs {before:.2f} s at the "
                    f"baseline -> {now / before:.2f}x"
                )
                if "agent-server" in figures:
                    theirs = statistics.median(f[at] for f in figures["agent-server"])
                    line += f"; agent-server {theirs:.2f} s -> {now / theirs:.2f}x"
                print(line)
        if exe is None:
            print("agent-server: left out (--no-peer)")


if __name__ == "__main__":
    main()
