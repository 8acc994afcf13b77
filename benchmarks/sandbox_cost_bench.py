"""A governed native run's fixed costs on repositories of 100 and 10,000 files, this tree vs
a baseline revision (issue 31: the sandbox's cost must not grow with the repository).

Run: uv run python benchmarks/sandbox_cost_bench.py [--files 100,10000] [--runs 5]
[--baseline e9d3eaf]

Each run is one real `service.run` (bwrap sandbox with the worktree quota, the toolbox, the
scripted model: one ``echo`` then finish, the commit gate landing the echo's file) in a fresh
interpreter whose ``synthorg`` is this tree's or the baseline's ``src/`` (extracted from git in
the same run; revisions and sizes interleaved run by run). Two spans, from the scripted
model's own clock in that process:

- start → first command: ``service.run()`` called → the model is first asked (the sandbox is
  up, the loop ready; the command is sent in that answer);
- finish → landed: the model answers ``finish`` → ``service.run()`` returned (sandbox torn
  down, quota copied back and released, NO_OP check, gate, commit).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from baseline import ROOT, extract_src

DRIVER = r"""
import json, time
from pathlib import Path

MARKS = {}

def script(messages, tools):
    from synthorg.engine.native.scripts import steps_of
    from synthorg.gateway.scripted import ScriptedTurn
    MARKS.setdefault("first_ask", time.perf_counter())
    done = [s for s in steps_of(messages) if s.name == "terminal" and s.result is not None]
    if not done:
        return ScriptedTurn.call("terminal", "Step 1.", command="echo hi > /workspace/hi.txt")
    MARKS["finish"] = time.perf_counter()
    return ScriptedTurn.call("finish", message="done")

async def main(home, repo):
    from synthorg.domain import Task, new_id
    from synthorg.service.boot import boot
    from synthorg.service.loops import default_provisioner, default_registry
    from synthorg.service.options import RunOptions
    from tests.support import scripted_settings
    settings = scripted_settings(Path(home), "run_cost_driver:script", model="bench")
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        task = Task(id=new_id("task"), project_id="p", prompt="echo", repository=repo)
        record = await c.service.create(task, RunOptions(loop="react"))
        started = time.perf_counter()
        result = await c.service.run(record.id)
        ended = time.perf_counter()
    assert result.commit_sha, result
    print(json.dumps({"start_to_first_command": MARKS["first_ask"] - started,
                      "finish_to_landed": ended - MARKS["finish"]}))
"""
RUN = "import asyncio, sys, run_cost_driver as d; asyncio.run(d.main(sys.argv[1], sys.argv[2]))"


def make_repo(path: Path, files: int) -> None:
    """A repository of ``files`` small files in directories of 100."""
    for i in range(files):
        sub = path / f"d{i // 100:04d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i % 100:03d}.txt").write_text(f"file {i}\n")
    git = ["git", "-C", str(path), "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)


def one_run(src: Path, driver_dir: Path, tmp: Path, repo: Path, n: int) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix=f"home-{n}-", dir=tmp))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(PYTHONPATH=f"{src}:{driver_dir}:{ROOT}", SYNTHORG_HOME=str(home))
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(home), str(repo)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", default="100,10000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", default="e9d3eaf")
    args = parser.parse_args()
    sizes = [int(n) for n in args.files.split(",")]
    print(f"load average {os.getloadavg()} on {os.cpu_count()} cpus")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as raw:
        tmp = Path(raw)
        driver_dir = tmp / "driver"
        driver_dir.mkdir()
        (driver_dir / "run_cost_driver.py").write_text(DRIVER)
        srcs = {"this tree": ROOT / "src", f"baseline {args.baseline}":
                extract_src(args.baseline, tmp / "baseline")}  # fmt: skip
        repos = {n: tmp / f"repo-{n}" for n in sizes}
        for n, repo in repos.items():
            make_repo(repo, n)
        spans: dict[tuple[str, int], list[dict[str, float]]] = {}
        for _ in range(args.runs):
            for n in sizes:
                for name, src in srcs.items():
                    spans.setdefault((name, n), []).append(
                        one_run(src, driver_dir, tmp, repos[n], n)
                    )
        print(f"\n{'revision':<18} {'files':>7} {'start->1st cmd p50':>19} "
              f"{'finish->landed p50':>19}   ({args.runs} runs each, interleaved)")  # fmt: skip
        for (name, n), runs in spans.items():
            first = statistics.median(r["start_to_first_command"] for r in runs) * 1000
            landed = statistics.median(r["finish_to_landed"] for r in runs) * 1000
            print(f"{name:<18} {n:>7} {first:>16.0f} ms {landed:>16.0f} ms")
    print(f"\nload average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
