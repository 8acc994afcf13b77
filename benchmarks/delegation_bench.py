"""Delegation: 4 independent sub-tasks delegated in parallel vs done in turn by one agent.

The same tool work either way: each sub-task is K shell commands (``sleep S`` + an append to
its own file). The scripted model answers each call after L ms (``latency_ms``), standing in
for model time. Three configurations, measured in the same run on the real stack (SQLite
store, embedded gateway, bwrap sandboxes, worktrees, checkpoints, commit gate):

- sequential: one agent runs the 4 x K commands itself, then finishes;
- parallel: a parent delegates the 4 sub-tasks (``max_concurrent`` 4), the host merges them;
- delegated, one at a time: the same delegation with ``max_concurrent`` 1.

Ratio = parallel / sequential wall time. Per-child overhead = (one-at-a-time - sequential -
the 5 extra model calls x L) / 4: what a child adds in worktree, bearer, sandbox start, its
checkpoints, its commit and the host merge, beyond the work itself.

    uv run python benchmarks/delegation_bench.py [--commands 3] [--sleep 0.3] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synthorg.engine.native.scripts import steps_of
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.options import RunOptions
from tests.support import make_task, scripted_settings

MODEL = "bench-model"
SUBTASKS = 4


def script(
    messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
) -> ScriptedTurn:
    """``WORK <json {files, commands, sleep}>`` runs the commands; ``DELEGATE <json>`` delegates."""
    prompt = next(str(m.content) for m in messages if m.role == "user").splitlines()[0]
    verb, _, body = prompt.partition(" ")
    steps = steps_of(messages)
    spec = json.loads(body)
    if verb == "DELEGATE":
        if not any(s.name == "delegate" and s.result for s in steps):
            return ScriptedTurn.call("delegate", tasks=spec)
        return ScriptedTurn.call("finish", message="delegated")
    todo = [
        f"sleep {spec['sleep']} && echo {n} >> {f}"
        for f in spec["files"]
        for n in range(spec["commands"])
    ]
    done = sum(1 for s in steps if s.name == "terminal" and s.result is not None)
    if done < len(todo):
        return ScriptedTurn.call("terminal", command=todo[done])
    return ScriptedTurn.call("finish", message="done")


def work(files: list[str], commands: int, sleep: float) -> str:
    return "WORK " + json.dumps({"files": files, "commands": commands, "sleep": sleep})


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    for n in range(SUBTASKS):
        (path / f"part{n}.txt").write_text("start\n")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "."],
        ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "parts"],
    ):
        subprocess.run(["git", *args], cwd=path, check=True)
    return path


async def timed(root: Path, name: str, prompt: str, latency_ms: float, concurrent: int) -> float:
    home = root / name / "home"
    repo = make_repo(root / name / "repo")
    settings = scripted_settings(
        home,
        f"{__name__ if __name__ != '__main__' else 'delegation_bench'}:script",
        model=MODEL,
        latency_ms=latency_ms,
        delegation={"max_concurrent": concurrent},
    )
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        record = await c.service.create(make_task(repo, prompt), RunOptions(max_turns=200))
        start = time.perf_counter()
        result = await c.service.run(record.id)
        elapsed = time.perf_counter() - start
    assert result.commit_sha, (name, result.termination_reason, result.error)
    landed = subprocess.run(
        ["git", "show", f"{result.branch}:part3.txt"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert landed.count("\n") > 1, landed  # the work really landed
    return elapsed


async def main(commands: int, sleep: float, latency_ms: float, repeats: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    files = [f"part{n}.txt" for n in range(SUBTASKS)]
    sequential = work(files, commands, sleep)
    delegated = "DELEGATE " + json.dumps([{"prompt": work([f], commands, sleep)} for f in files])
    figures: dict[str, list[float]] = {"sequential": [], "parallel": [], "one_at_a_time": []}
    with tempfile.TemporaryDirectory(prefix="deleg-bench-") as tmp:
        for rep in range(repeats):
            root = Path(tmp) / str(rep)
            figures["sequential"].append(await timed(root, "seq", sequential, latency_ms, 4))
            figures["parallel"].append(await timed(root, "par", delegated, latency_ms, 4))
            figures["one_at_a_time"].append(await timed(root, "one", delegated, latency_ms, 1))
    med = {k: statistics.median(v) for k, v in figures.items()}
    overhead = (med["one_at_a_time"] - med["sequential"] - 5 * latency_ms / 1000) / SUBTASKS
    print(
        f"sub-tasks {SUBTASKS} x {commands} commands (sleep {sleep}s), "
        f"model latency {latency_ms} ms, repeats {repeats}"
    )
    for key, values in figures.items():
        print(
            f"  {key:14s} median {med[key]:.2f} s  (runs: {', '.join(f'{v:.2f}' for v in values)})"
        )
    print(f"  ratio parallel / sequential = {med['parallel'] / med['sequential']:.2f}x")
    print(
        "  per-child overhead (worktree + bearer + sandbox + checkpoints + commit + merge) = "
        f"{overhead * 1000:.0f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commands", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.3)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.commands, args.sleep, args.latency_ms, args.repeats))
