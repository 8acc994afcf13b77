"""A governed native run's fixed costs on repositories of 100 to 100,000 files, this tree vs
a baseline revision and vs the same run unsandboxed (issue 31: the sandbox's cost must not
grow with the repository).

Run: uv run python benchmarks/sandbox_cost_bench.py [--files 100,10000,100000] [--runs 5]
[--baseline 1400bb4] [--real GIT_DIR]

``--real``: a real repository too (a local clone or mirror, e.g. one brought by the library's
``fetch``), cloned once into the bench's dir and run like the generated ones.

Variants: this tree (the worktree an overlay on an empty quota image, its lower layer an
idmapped clone of the worktree), the baseline (by default main before the idmap: the same
overlay over a worktree chowned to the sandbox user at every start), and this
tree with the local backend (``[sandbox] backend = "local"``: no sandbox, no quota), which is
the same command run unsandboxed: what the sandbox adds is the difference.

Each run is one real `service.run` (bwrap sandbox with the worktree quota, the toolbox, the
scripted model: one ``echo`` then finish, the commit gate landing the echo's file) in a fresh
interpreter whose ``synthorg`` is this tree's or the baseline's ``src/`` (extracted from git in
the same run; revisions and sizes interleaved run by run). Two spans, from the scripted
model's own clock in that process:

- start → first command: ``service.run()`` called → the command ran, by the command's own
  clock (it writes ``date +%s%N`` into the file it makes; the landed commit is read for it).
  Everything the run does before its first action counts: the sandbox, the loop, the model's
  first answer, and the run's first checkpoint (the whole tree, taken before that action);
- (start → first ask: ``service.run()`` called → the model is first asked, shown beside it;
  until 2026-12-04 this was the figure called "start → first command", which left the first
  checkpoint out);
- finish → landed: the model answers ``finish`` → ``service.run()`` returned (sandbox torn
  down, quota copied back and released, NO_OP check, gate, commit);
- (the whole run: ``service.run()`` called → returned, shown beside them: since 2026-12-04
  the first checkpoint's scan runs beside the first command, so with this model, which
  answers at once, what it costs moves from the first span to the time between the spans.)
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
import json, subprocess, time
from pathlib import Path

MARKS = {}

def script(messages, tools):
    from synthorg.engine.native.scripts import steps_of
    from synthorg.gateway.scripted import ScriptedTurn
    MARKS.setdefault("first_ask", time.perf_counter())
    done = [s for s in steps_of(messages) if s.name == "terminal" and s.result is not None]
    if not done:
        return ScriptedTurn.call("terminal", "Step 1.", command="date +%s%N > hi.txt")
    MARKS["finish"] = time.perf_counter()
    return ScriptedTurn.call("finish", message="done")

async def main(home, repo, backend):
    from synthorg.domain import Task, new_id
    from synthorg.service.boot import boot
    from synthorg.service.loops import default_provisioner, default_registry
    from synthorg.service.options import RunOptions
    from tests.support import scripted_settings
    sandbox = {"backend": backend, "allow_local": backend == "local"}
    settings = scripted_settings(Path(home), "run_cost_driver:script", model="bench",
                                 sandbox=sandbox)
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        task = Task(id=new_id("task"), project_id="p", prompt="echo", repository=repo)
        record = await c.service.create(task, RunOptions(loop="react"))
        started, started_ns = time.perf_counter(), time.time_ns()
        result = await c.service.run(record.id)
        ended = time.perf_counter()
    assert result.commit_sha, result
    shown = subprocess.run(["git", "-C", repo, "show", f"{result.commit_sha}:hi.txt"],
                           check=True, capture_output=True, text=True).stdout
    print(json.dumps({"start_to_first_command": (int(shown) - started_ns) / 1e9,
                      "start_to_first_ask": MARKS["first_ask"] - started,
                      "finish_to_landed": ended - MARKS["finish"],
                      "whole_run": ended - started}))
"""
RUN = (
    "import asyncio, sys, run_cost_driver as d; "
    "asyncio.run(d.main(sys.argv[1], sys.argv[2], sys.argv[3]))"
)
UNSANDBOXED = "unsandboxed"


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


def one_run(
    src: Path, driver_dir: Path, tmp: Path, repo: Path, n: int, backend: str
) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix=f"home-{n}-", dir=tmp))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(PYTHONPATH=f"{src}:{driver_dir}:{ROOT}", SYNTHORG_HOME=str(home))
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(home), str(repo), backend],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


_SPANS = ("start_to_first_command", "finish_to_landed")


def _p50(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs) * 1000


def clone_real(source: str, path: Path) -> int:
    """A checkout of a real repository's HEAD at path; its number of files."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", source, str(path)], check=True)
    listed = subprocess.run(["git", "-C", str(path), "ls-files", "-z"], check=True,
                            capture_output=True).stdout  # fmt: skip
    return listed.count(b"\0")


def report(
    spans: dict[tuple[str, int], list[dict[str, float]]], sizes: list[int], runs: int
) -> None:
    """p50 of both spans per variant and size; then this tree's cost at the largest size
    against its cost at the smallest and against the unsandboxed run of the same size."""
    print(f"\n{'variant':<18} {'files':>7} {'start->1st cmd p50':>19} {'(->1st ask)':>12} "
          f"{'finish->landed p50':>19} {'sum':>9} {'(whole run)':>12}   "
          f"({runs} runs each, interleaved)")  # fmt: skip
    total: dict[tuple[str, int], float] = {}
    for (name, n), measured in sorted(spans.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        first = _p50(measured, "start_to_first_command")
        ask = _p50(measured, "start_to_first_ask")
        landed = _p50(measured, "finish_to_landed")
        whole = _p50(measured, "whole_run")
        total[(name, n)] = first + landed
        print(f"{name:<18} {n:>7} {first:>16.0f} ms {ask:>9.0f} ms {landed:>16.0f} ms "
              f"{first + landed:>6.0f} ms {whole:>9.0f} ms")  # fmt: skip
    small, large = min(sizes), max(sizes)
    ours = total[("this tree", large)]
    print(f"\nthis tree, {large} files vs {small}: {ours / total[('this tree', small)]:.2f}x "
          f"(target <= 1.2x); over unsandboxed at {large} files: "
          f"{(ours - total[(UNSANDBOXED, large)]) / 1000:+.2f} s (target <= 0.3 s)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", default="100,10000,100000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", default="1400bb4")
    parser.add_argument("--real", help="a real repository's git dir or URL, cloned once")
    args = parser.parse_args()
    sizes = [int(n) for n in args.files.split(",")]
    generated = list(sizes)
    print(f"load average {os.getloadavg()} on {os.cpu_count()} cpus")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as raw:
        tmp = Path(raw)
        driver_dir = tmp / "driver"
        driver_dir.mkdir()
        (driver_dir / "run_cost_driver.py").write_text(DRIVER)
        srcs = {"this tree": (ROOT / "src", "bwrap"),
                f"baseline {args.baseline}": (extract_src(args.baseline, tmp / "baseline"),
                                              "bwrap"),
                UNSANDBOXED: (ROOT / "src", "local")}  # fmt: skip
        repos = {n: tmp / f"repo-{n}" for n in sizes}
        for n, repo in repos.items():
            make_repo(repo, n)
        if args.real:
            real = tmp / "repo-real"
            n = clone_real(args.real, real)
            print(f"real repository {args.real}: {n} files at HEAD")
            repos[n] = real
            sizes.append(n)
        spans: dict[tuple[str, int], list[dict[str, float]]] = {}
        for _ in range(args.runs):
            for n in sizes:
                for name, (src, backend) in srcs.items():
                    spans.setdefault((name, n), []).append(
                        one_run(src, driver_dir, tmp, repos[n], n, backend)
                    )
        report(spans, generated, args.runs)
        if args.real:
            real_n = sizes[-1]
            ours, bare, small = (
                sum(_p50(spans[key], k) for k in _SPANS)
                for key in (("this tree", real_n), (UNSANDBOXED, real_n),
                            ("this tree", min(generated)))
            )  # fmt: skip
            print(f"real repository ({real_n} files): this tree {ours:.0f} ms, "
                  f"{ours / small:.2f}x of {min(generated)} files, "
                  f"{(ours - bare) / 1000:+.2f} s over unsandboxed")  # fmt: skip
    print(f"\nload average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
