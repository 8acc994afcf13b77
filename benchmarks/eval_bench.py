"""Eval throughput and overhead: tasks/minute at concurrency 1, 2, 4 on the starter suite.

Scripted models only (no key): the 12 trivial + simple starter tasks, arms ``react`` and
``plan_execute`` with the strong scripted model, each a real governed run (worktree, gateway,
bwrap, gate) followed by its hidden check in a fresh sandbox. Reported per concurrency: runs
per minute, and the eval's own overhead (hidden check + bookkeeping) as a share of the item's
wall time, against the runs themselves measured in the same eval.

    uv run python benchmarks/eval_bench.py [--concurrency 1 2 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import tomlkit

from synthorg.domain import new_id
from synthorg.eval.results import Arm, EvalPlan
from synthorg.eval.runner import EvalRunner, save_plan
from synthorg.eval.starter import materialize
from synthorg.logging import configure_logging
from synthorg.runtime.judge import build_judge
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.settings import Settings

MODEL = "eval-strong"


def settings(home: Path) -> Settings:
    return Settings(
        home=home,
        sections={
            "gateway": {
                "providers": [
                    {
                        "name": "scripted",
                        "kind": "scripted",
                        "models": [MODEL],
                        "scripts": {MODEL: "synthorg.eval.scripts:strong_script"},
                    }
                ],
                "prices": {MODEL: {"input_per_mtok_usd": 3, "output_per_mtok_usd": 15}},
            },
            "run": {"model": MODEL},
        },
    )


def subset(starter: Path) -> Path:
    doc = tomlkit.parse(starter.read_text())
    keep = tomlkit.aot()
    for task in doc["task"]:
        if task["complexity"] in ("trivial", "simple"):
            keep.append(task)
    out = starter.with_name("bench.toml")
    out.write_text(tomlkit.dumps(tomlkit.document() | {"task": keep}))
    return out


async def one(concurrency: int, scratch: Path, suite: Path) -> tuple[float, float, float, int]:
    home = scratch / f"home-c{concurrency}"
    plan = EvalPlan(
        eval_id=new_id("eval"),
        suite_path=str(suite),
        arms=(Arm(loop="react"), Arm(loop="plan_execute")),
        concurrency=concurrency,
    )
    async with boot(
        settings(home), registry=default_registry(), provisioner=default_provisioner
    ) as components:
        await save_plan(components.store, plan)
        judge = await asyncio.to_thread(build_judge, home)  # built before the clock starts
        started = time.monotonic()
        results = await EvalRunner(components, plan, lambda _k, _r: None, judge).run()
        wall = time.monotonic() - started
    overhead = statistics.median(r.check_s for r in results)
    runs = statistics.median(r.wall_s - r.check_s for r in results)
    return len(results) / wall * 60, overhead, runs, sum(r.resolved for r in results)


def main() -> None:
    configure_logging("WARNING")  # the figures, not every run's log lines
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="eval-bench-") as tmp:
        scratch = Path(tmp)
        suite = subset(materialize(scratch / "starter"))
        base = None
        for c in args.concurrency:
            rate, check, run, resolved = asyncio.run(one(c, scratch, suite))
            base = base or rate
            speedup, share = rate / base, check / (run + check)
            print(
                f"concurrency {c}: {rate:5.1f} runs/min ({speedup:.2f}x the first); median run "
                f"{run:.2f} s, check+bookkeeping {check:.2f} s ({share:.0%} of an item); "
                f"resolved {resolved}"
            )


if __name__ == "__main__":
    main()
