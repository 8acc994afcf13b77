"""One-shot `synthorg run --loop openhands`: embedded vs handed to a `synthorg worker`'s pool.

Run: uv run python benchmarks/openhands_worker_bench.py [--reps 3]

A fresh `synthorg run` process cannot have the SDK imported before it starts (~5-8 s of CPU
idle); a long-lived process can. This measures the one existing way a one-shot command hands
its run to one: `synthorg run --engine temporal` starts the run as a workflow, and a `synthorg
worker` (which keeps `[openhands] pool_size` sandboxes warm, as `serve` does) runs it.

- embedded (the baseline, same run): `synthorg run --loop openhands` as a user runs it, with
  its default pool (one sandbox started at boot, serving that one run).
- temporal: `synthorg run --loop openhands --engine temporal` with one worker whose pooled
  sandbox has settled (every thread of its tree asleep, CPU still: the SDK imported).

Both timed from the spawn to the first model request at the gateway (``oh_first_request``
stamps each request: the worker's gateway for temporal, the command's own for embedded).
Everything real: a Temporal dev server, PostgreSQL (a fresh schema), bwrap sandboxes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from openhands_loop_bench import ROOT, _config, _repo, _runtime, _stamps, _until_idle

from support import temporal_on_postgres


def _env(home: Path, stamps: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(
        SYNTHORG_HOME=str(home),
        PYTHONPATH=f"{ROOT / 'src'}:{ROOT / 'benchmarks'}:{ROOT}",
        OH_BENCH_STAMPS=str(stamps),
        OH_BENCH_TURNS="1",
    )
    env.pop("PYTHONPYCACHEPREFIX", None)  # the tree's own bytecode, as an install has
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _first_after(stamps: Path, started: float) -> float:
    return min(t for t in _stamps(stamps) if t >= started)


def one_shot(
    config: Path, home: Path, repo: Path, stamps: Path, *engine: str
) -> dict[str, float | str]:
    """``synthorg run`` spawned as a user runs it: spawn -> first model request, and when
    it printed the conversation's header (temporal: the workflow has started)."""
    argv = [sys.executable, "-m", "synthorg.cli.app", "run", "Write progress.txt"]
    argv += ["--repo", str(repo), "--loop", "openhands", "--max-turns", "6", "-c", str(config)]
    started = time.time()
    proc = subprocess.Popen(
        [*argv, *engine], env=_env(home, stamps), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert proc.stdout is not None
    out: dict[str, float | str] = {}
    lines = []
    for raw in proc.stdout:
        line = raw.decode(errors="replace")
        lines.append(line)
        found = re.search(r"conversation (conv-[0-9a-f]+)", line)
        if found and "header" not in out:
            out["header"], out["id"] = time.time() - started, found.group(1)
    assert proc.wait() == 0, "".join(lines)[-3000:]
    out["first_request"] = _first_after(stamps, started) - started
    out["started"] = started
    return out


def start_worker(config: Path, home: Path, stamps: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "synthorg.cli.app", "worker", "-c", str(config)]
    proc = subprocess.Popen(
        argv, env=_env(home, stamps), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if b" ready: " in line:
            break
    else:
        raise RuntimeError("worker exited before it was ready")
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # never a full pipe
    return proc


async def settled_slot(worker: int) -> None:
    """Until the worker has one pooled sandbox and it has imported the SDK."""
    while True:
        slots = [p for p in psutil.Process(worker).children() if "bwrap" in p.name()]
        if len(slots) == 1:
            await _until_idle(slots[0].pid)
            return
        await asyncio.sleep(0.2)  # the replacement starts when a run takes the slot


def temporal_config(path: Path, store: str, address: str, queue: str, repos: Path) -> Path:
    _config(path, pool_size=1)
    with path.open("a") as out:
        out.write(
            f'[store]\nurl = "{store}"\n[server]\nrepository_roots = ["{repos}"]\n'
            f'[distributed]\nengine = "temporal"\naddress = "{address}"\ntask_queue = "{queue}"\n'
        )
    return path


async def main(reps: int) -> None:
    runtime = _runtime(None)
    async with temporal_on_postgres("ohw") as scratch:
        root = scratch.root
        worker = None
        try:
            homes = {side: root / side for side in ("embedded", "temporal")}
            for home in homes.values():
                home.mkdir()
                (home / "runtimes").symlink_to(runtime.venv_path.parents[1])
            repos = root / "repos"
            embedded_config = _config(root / "embedded.toml", pool_size=1)
            queue = f"ohw-{secrets.token_hex(3)}"
            config = temporal_config(
                root / "temporal.toml", scratch.store_url, scratch.address, queue, repos
            )
            worker_stamps = root / "worker-stamps"
            worker = start_worker(config, homes["temporal"], worker_stamps)
            print(f"load average at start {os.getloadavg()}")
            sides: dict[str, list[float]] = {"embedded": [], "temporal": []}
            for n in range(-1, reps):  # -1: an uncounted warm-up per side (bytecode, Temporal)
                embedded = float(
                    one_shot(
                        embedded_config, homes["embedded"], _repo(repos / f"e{n}"), root / f"e{n}"
                    )["first_request"]
                )
                await settled_slot(worker.pid)
                run = one_shot(
                    config, homes["temporal"], _repo(repos / f"t{n}"), worker_stamps,
                    "--engine", "temporal",
                )  # fmt: skip
                temporal = float(run["first_request"])
                header = float(run["header"])
                print(
                    f"rep {n}: embedded {embedded:.2f} s, temporal {temporal:.2f} s (of it, until "
                    f"the command printed the started workflow's header {header:.2f} s)"
                )
                if n >= 0:
                    sides["embedded"].append(embedded)
                    sides["temporal"].append(temporal)
            e, t = (statistics.median(sides[k]) for k in ("embedded", "temporal"))
            print(f"load average at end {os.getloadavg()}")
            print(f"one-shot run -> first model request, medians of {reps}:")
            print(f"  embedded (its own pool, started at boot) {e:.2f} s")
            print(f"  temporal (a worker's settled pool)       {t:.2f} s  ratio {t / e:.3f}x")
        finally:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(120)
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="runs per side")
    asyncio.run(main(parser.parse_args().reps))
