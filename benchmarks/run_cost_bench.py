"""Control-plane CPU per governed run, and its parts, against a baseline revision.

    uv run python benchmarks/run_cost_bench.py [--runs 8] [--rounds 3] [--baseline-rev 6681ac7]

A worker process boots the real stack (SQLite store, embedded gateway serving the demo's
scripted model, bwrap sandbox with the toolbox, worktrees, checkpoints, the commit gate) and
runs the demo task (find the bug, fix it, run the tests) ``--runs`` times one after another.
The figure per run is the CPU (user + system) of the worker and of every child it reaped
(git, bwrap and what runs inside), from ``getrusage`` deltas around each run. The parts are
measured the same way on their own, on the same stack: worktree creation + removal, one
sandbox toolbox start + one command + stop, and one checkpoint after a one-file edit.

The baseline is the same worker run from ``git archive <rev>`` (the same venv); workers of
both alternate ``--rounds`` times so machine load hits them alike. Medians; the ratio is
current / baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from baseline import extract_src

ROOT = Path(__file__).resolve().parents[1]


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


async def _cpu_of(action: Callable[[], Awaitable[Any]]) -> float:
    before = _cpu()
    await action()
    return _cpu() - before


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
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        for i in range(runs + 1):  # the first run warms imports and caches: not counted
            repo = create_demo_repo(scratch / f"calc-{i}")
            task = Task(
                id=new_id("task"), project_id="bench", prompt=DEMO_TASK, repository=str(repo)
            )
            before = _cpu()
            record = await c.service.create(task, RunOptions())
            result = await c.service.run(record.id)
            spent = _cpu() - before
            if result.commit_sha is None:  # the demo fix lands a commit; anything else failed
                raise SystemExit(f"run {i} landed nothing: {result}")
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

            made = await _cpu_of(create)
            ws = holder[0]
            (ws.path / "calc.py").write_text((ws.path / "calc.py").read_text() + "\n# edited\n")

            async def checkpoint(ws: Any = ws, conversation: str = conversation) -> None:
                await c.checkpoints.create(ws, conversation)

            figures["checkpoint"].append(await _cpu_of(checkpoint))

            async def sandbox(ws: Any = ws, conversation: str = conversation) -> None:
                request = SandboxRequest(
                    argv=c.sandbox.toolbox_argv(),
                    workspace=ws.path,
                    limits=c.sandbox_settings.limits,
                    conversation_id=conversation,
                )
                async with ToolboxClient(c.sandbox, request) as toolbox:
                    await toolbox.run("true", timeout_s=60)

            figures["sandbox"].append(await _cpu_of(sandbox))

            async def remove(ws: Any = ws) -> None:
                await c.worktrees.remove(ws, delete_branch=True)

            figures["worktree"].append(made + await _cpu_of(remove))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-rev", default="6681ac7")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        with tempfile.TemporaryDirectory(prefix="synthorg-run-cost-") as tmp:
            print(json.dumps(asyncio.run(_worker(args.runs, Path(tmp)))))
        return

    with tempfile.TemporaryDirectory(prefix="synthorg-run-cost-base-") as tmp:
        variants = {"current": ROOT / "src", "baseline": extract_src(args.baseline_rev, Path(tmp))}
        merged: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
        for _ in range(args.rounds):
            for name, src in variants.items():
                for part, values in _spawn_worker(src, args.runs).items():
                    merged[name].setdefault(part, []).extend(values)
    load = os.getloadavg()[0]
    runs = f"{args.rounds} rounds x {args.runs} runs"
    print(f"{runs}, load average {load:.1f}, baseline {args.baseline_rev}")
    for part in ("run", "worktree", "sandbox", "checkpoint"):
        now = statistics.median(merged["current"][part])
        before = statistics.median(merged["baseline"][part])
        print(
            f"{part:>10}: {now * 1000:6.1f} ms CPU vs {before * 1000:6.1f} ms at the baseline "
            f"-> {now / before:.2f}x"
        )


if __name__ == "__main__":
    main()
