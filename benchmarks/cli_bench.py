"""CLI start-up benchmark: `--help`, `conversations list` and a run's first event, vs baselines.

    uv run python benchmarks/cli_bench.py [--rounds 7] [--run-rounds 3] [--baseline-rev c505cd3]
        [--venv ~/.cache/synthorg-bench/agent-server] [--no-peer]

Every figure is the median wall time of fresh processes, rounds interleaved so machine load
hits all variants alike. Baselines measured in the same run:
  - ``python -c pass``: the interpreter's own start-up (the floor);
  - the pre-change import set: ``import typer, rich, fastapi, mcp, psycopg, uvicorn, httpx``,
    what every command paid before commands were loaded lazily;
  - the CLI at ``--baseline-rev`` (extracted with ``git archive``, run from the same venv).
The run's time to first event is from spawning ``synthorg run`` (the demo task, scripted
model, bwrap sandbox) to the first event line on its stdout.

The peer's figure in the same rounds: ``agent-server --help`` of OpenHands' agent-server
1.58.2 (its venv made once by ``server_vs_agent_server_bench.ensure_peer``), the command line
of the OpenHands program that plays our ``synthorg serve``'s part. OpenHands' own CLI (PyPI
``openhands``) is not installed on this machine (neither in that venv nor in the OpenHands
runtime venv the tests build), so ``--help`` and a run's first event have no CLI peer here:
the output says so.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from baseline import bytecode_env, extract_src
from server_vs_agent_server_bench import ensure_peer

ROOT = Path(__file__).resolve().parents[1]
PEER_HELP = "agent-server --help (OpenHands 1.58.2)"
PRE_CHANGE_IMPORTS = "import typer, rich.console, fastapi, mcp, psycopg, uvicorn, httpx"


def _env(home: Path, src: Path, *, bytecode: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(SYNTHORG_HOME=str(home), PYTHONPATH=f"{src}:{ROOT}", COLUMNS="120")
    return bytecode_env(env, home.parent / "pycache", enabled=bytecode)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one command: CPU barely depends on the machine's load."""
    cpu, started = _children_cpu(), time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed: {done.stderr.decode(errors='replace')[-2000:]}")
    return elapsed, _children_cpu() - cpu


def _first_event(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU of the CLI process and its reaped children) at the first event line."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    first = None
    for raw in proc.stdout:
        if first is None and raw.lstrip().startswith(b"1 status"):
            wall, cpu = time.perf_counter() - started, psutil.Process(proc.pid).cpu_times()
            first = wall, cpu.user + cpu.system + cpu.children_user + cpu.children_system
    if proc.wait() != 0 or first is None:
        raise SystemExit(f"{argv} failed or printed no event")
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--run-rounds", type=int, default=3)
    parser.add_argument("--baseline-rev", default="c505cd3")
    parser.add_argument(
        "--no-bytecode", action="store_true", help="compile every module in every process"
    )
    parser.add_argument(
        "--venv", type=Path, default=Path.home() / ".cache" / "synthorg-bench" / "agent-server"
    )
    parser.add_argument("--no-peer", action="store_true", help="leave agent-server out")
    args = parser.parse_args()
    bytecode = not args.no_bytecode
    peer = None if args.no_peer else ensure_peer(args.venv)

    from synthorg.service.demo import DEMO_TASK, create_demo_repo

    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="cli-bench-") as tmp:
        scratch = Path(tmp)
        src, old_src = ROOT / "src", extract_src(args.baseline_rev, scratch / "old")
        # One data dir each: a baseline older than the current schema refuses a newer store.
        home, old_home = scratch / "home", scratch / "home-old"
        env, old_env = (
            _env(home, src, bytecode=bytecode),
            _env(old_home, old_src, bytecode=bytecode),
        )
        cli = [py, "-m", "synthorg.cli.app"]
        for warm_env in (env, old_env):  # creates the home; fills the bytecode cache
            subprocess.run([*cli, "conversations", "list"], env=warm_env, capture_output=True)
            subprocess.run([py, "-c", PRE_CHANGE_IMPORTS], env=warm_env, capture_output=True)
        repo = create_demo_repo(scratch / "calc")
        config = scratch / "bench.toml"
        config.write_text(
            '[[gateway.providers]]\nname = "scripted"\nkind = "scripted"\n'
            'models = ["m"]\nscript = "synthorg.engine.native.scripts:demo_fix_script"\n'
            '[run]\nmodel = "m"\n'
        )

        variants: dict[str, Callable[[], tuple[float, float]]] = {
            "python -c pass": lambda: _timed([py, "-c", "pass"], env),
            "pre-change import set": lambda: _timed([py, "-c", PRE_CHANGE_IMPORTS], env),
            "synthorg --help": lambda: _timed([*cli, "--help"], env),
            f"synthorg --help @{args.baseline_rev}": lambda: _timed([*cli, "--help"], old_env),
            "conversations list": lambda: _timed([*cli, "conversations", "list"], env),
            f"conversations list @{args.baseline_rev}": lambda: _timed(
                [*cli, "conversations", "list"], old_env
            ),
        }
        if peer is not None:  # its import fetches a price list from the network unless told
            peer_env = {**os.environ, "HOME": str(scratch), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
            peer_env = bytecode_env(peer_env, peer.parent.parent / "pycache", enabled=bytecode)
            subprocess.run([str(peer), "--help"], env=peer_env, capture_output=True, check=True)
            variants[PEER_HELP] = lambda: _timed([str(peer), "--help"], peer_env)
        runs: dict[str, Callable[[], tuple[float, float]]] = {
            "run: first event": lambda: _first_event(
                [*cli, "run", DEMO_TASK, "--repo", str(repo), "-c", str(config)], env
            ),
            f"run: first event @{args.baseline_rev}": lambda: _first_event(
                [*cli, "run", DEMO_TASK, "--repo", str(repo), "-c", str(config)], old_env
            ),
        }
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in [*variants, *runs]}
        for _ in range(args.rounds):
            for name, measure in variants.items():
                times[name].append(measure())
        for measure in runs.values():  # fills the bytecode cache of the run path; not counted
            measure()
        for _ in range(args.run_rounds):
            for name, measure in runs.items():
                times[name].append(measure())
        for each in (home, old_home):
            shutil.rmtree(each, ignore_errors=True)

    median = {name: statistics.median(wall for wall, _ in values) for name, values in times.items()}
    cpu = {name: statistics.median(c for _, c in values) for name, values in times.items()}
    floor = median["python -c pass"]
    print(f"{'variant':<40} {'median s':>9} {'- floor s':>9} {'CPU s':>7}")
    for name, value in median.items():
        print(f"{name:<40} {value:>9.3f} {value - floor:>9.3f} {cpu[name]:>7.3f}")
    rev = args.baseline_rev
    print()
    for what in ("synthorg --help", "conversations list", "run: first event"):
        old, old_cpu = median[f"{what} @{rev}"], cpu[f"{what} @{rev}"]
        print(
            f"{what}: {median[what]:.3f} s vs {old:.3f} s at {rev} -> {median[what] / old:.2f}x; "
            f"CPU {cpu[what]:.3f} s vs {old_cpu:.3f} s -> {cpu[what] / old_cpu:.2f}x"
        )
    if PEER_HELP in median:
        theirs, their_cpu = median[PEER_HELP], cpu[PEER_HELP]
        print(
            f"synthorg --help: {median['synthorg --help']:.3f} s vs {PEER_HELP} {theirs:.3f} s "
            f"-> {median['synthorg --help'] / theirs:.2f}x; CPU {cpu['synthorg --help']:.3f} s "
            f"vs {their_cpu:.3f} s -> {cpu['synthorg --help'] / their_cpu:.2f}x"
        )
    print(
        "OpenHands CLI (PyPI `openhands`): not installed on this machine: no peer figure for "
        "`--help` of that CLI nor for a run's first event"
    )
    print(
        f"synthorg --help over the interpreter floor: {median['synthorg --help'] - floor:.3f} s; "
        f"the pre-change import set alone: {median['pre-change import set'] - floor:.3f} s"
    )
    print(f"load average now: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus", end=", ")
    print(f"bytecode {'cached' if bytecode else 'off'}")


if __name__ == "__main__":
    main()
