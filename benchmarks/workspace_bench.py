"""Workspace benchmark: worktree creation and checkpoints on a generated 20,000-file repository.

Baselines are measured in the same run on the same repository:
- worktree creation vs plain ``git worktree add`` (target ratio <= 1.1x);
- checkpoint after a 3-file edit vs ``git stash create`` (target p50 <= 50 ms).

Run: ``uv run python benchmarks/workspace_bench.py [--files 20000] [--rounds 7] [--edits 40]``
(``--repo DIR`` keeps the generated repository for reruns; ``--skip-worktrees`` times only
checkpoints.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from synthorg.workspace import views
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.worktrees import WorktreeManager

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.test",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.test",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True
    ).stdout


def generate_repo(root: Path, n_files: int, rng: random.Random) -> list[str]:
    """A repository of ``n_files`` small source-like files in a two-level tree."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    paths = []
    for i in range(n_files):
        rel = f"pkg{i % 40:02d}/sub{(i // 40) % 10}/module_{i}.py"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "".join(f"value_{j} = {rng.randrange(10**6)}\n" for j in range(rng.randint(3, 12)))
        path.write_text(f'"""Module {i}."""\n{body}')
        paths.append(rel)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "generated")
    return paths


def child_cpu() -> float:
    """CPU seconds (user + system) used by this process and its finished children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ", 1)[0]
    except OSError:
        return "n/a"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def bench_worktrees(repo: Path, home: Path, rounds: int) -> tuple[list[float], list[float]]:
    manager = WorktreeManager(home)
    plain_dir = home / "plain"
    plain_dir.mkdir(parents=True)
    ours: list[float] = []
    plain: list[float] = []
    for i in range(rounds):
        # Alternate the order so neither side always runs on a warmer cache.
        for side in ("plain", "ours") if i % 2 == 0 else ("ours", "plain"):
            if side == "plain":
                target = plain_dir / f"wt{i}" / repo.name
                start = time.perf_counter()
                subprocess.run(
                    ["git", "worktree", "add", "-q", "-b", f"plain/{i}", str(target), "HEAD"],
                    cwd=repo,
                    env=ENV,
                    check=True,
                    capture_output=True,
                )
                plain.append(time.perf_counter() - start)
                git(repo, "worktree", "remove", "--force", str(target))
                git(repo, "branch", "-D", "-q", f"plain/{i}")
            else:
                start = time.perf_counter()
                ws = await manager.create(repo, f"bench-{i}")
                ours.append(time.perf_counter() - start)
                await manager.remove(ws, delete_branch=True)
    return ours, plain


def edit_three(root: Path, paths: list[str], rng: random.Random, tag: int) -> None:
    for rel in rng.sample(paths, 3):
        with (root / rel).open("a") as f:
            f.write(f"edit_{tag} = {rng.random()}\n")


@dataclass
class CheckpointFigures:
    """Seconds per operation, wall and CPU, plus one-off timings on the same tree."""

    first: float
    ours: list[float]
    stash: list[float]
    ours_cpu: list[float]
    stash_cpu: list[float]
    changes: float
    changed_files: int
    rollback: float


async def bench_checkpoints(
    repo: Path, home: Path, paths: list[str], edits: int, rng: random.Random
) -> CheckpointFigures:
    manager = WorktreeManager(home)
    ws = await manager.create(repo, "bench-cp")
    store = CheckpointStore()
    start = time.perf_counter()
    await store.create(ws)
    first = time.perf_counter() - start
    ours: list[float] = []
    ours_cpu: list[float] = []
    stash: list[float] = []
    stash_cpu: list[float] = []
    for i in range(edits):
        edit_three(ws.path, paths, rng, i)
        cpu, start = child_cpu(), time.perf_counter()
        await store.create(ws)
        ours.append(time.perf_counter() - start)
        ours_cpu.append(child_cpu() - cpu)
        edit_three(ws.path, paths, rng, 10_000 + i)
        cpu, start = child_cpu(), time.perf_counter()
        subprocess.run(
            ["git", "stash", "create"], cwd=ws.path, env=ENV, check=True, capture_output=True
        )
        stash.append(time.perf_counter() - start)
        stash_cpu.append(child_cpu() - cpu)
    # Views on the same big tree, for the record.
    start = time.perf_counter()
    changed = await views.changes(ws)
    changes_s = time.perf_counter() - start
    cp = (await store.list(ws))[-1]
    edit_three(ws.path, paths, rng, 99_999)
    (ws.path / "brand_new.txt").write_text("new\n")
    start = time.perf_counter()
    await store.rollback(ws, cp.index)
    rollback_s = time.perf_counter() - start
    assert not (ws.path / "brand_new.txt").exists()
    await manager.remove(ws, delete_branch=True)
    return CheckpointFigures(
        first=first,
        ours=ours,
        stash=stash,
        ours_cpu=ours_cpu,
        stash_cpu=stash_cpu,
        changes=changes_s,
        changed_files=len(changed),
        rollback=rollback_s,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7, help="worktree creations per side")
    parser.add_argument("--edits", type=int, default=40, help="3-file edits to checkpoint")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repo", type=Path, help="reuse (or keep) the generated repo here")
    parser.add_argument("--skip-worktrees", action="store_true", help="checkpoints only")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="synthorg-ws-bench-"))
    repo = args.repo.absolute() if args.repo else tmp / "bigrepo"
    try:
        start = time.perf_counter()
        if (repo / ".git").is_dir():
            paths = git(repo, "ls-files", "*.py").split()
            print(f"reusing {repo} ({len(paths)} files)", end=" ")
        else:
            paths = generate_repo(repo, args.files, rng)
            print(f"generated {args.files} files in {time.perf_counter() - start:.1f}s", end=" ")
        print(f"(load average {loadavg()} on {os.cpu_count()} cores)")
        if not args.skip_worktrees:
            ours, plain = await bench_worktrees(repo, tmp / "home", args.rounds)
            ratio = statistics.median(ours) / statistics.median(plain)
            print(
                f"worktree creation: synthorg median {statistics.median(ours) * 1000:.0f} ms, "
                f"plain `git worktree add` median {statistics.median(plain) * 1000:.0f} ms, "
                f"ratio {ratio:.2f}x (target <= 1.10x) -> {'PASS' if ratio <= 1.1 else 'FAIL'}"
            )
        res = await bench_checkpoints(repo, tmp / "home", paths, args.edits, rng)
        cp, st = res.ours, res.stash
        p50 = statistics.median(cp)
        print(
            f"checkpoint after 3-file edit: p50 {p50 * 1000:.1f} ms, p95 {pct(cp, 0.95) * 1000:.1f}"
            f" ms (target p50 <= 50 ms) -> {'PASS' if p50 <= 0.05 else 'FAIL'}; "
            f"first checkpoint {res.first * 1000:.0f} ms"
        )
        print(
            f"baseline `git stash create`: p50 {statistics.median(st) * 1000:.1f} ms, "
            f"p95 {pct(st, 0.95) * 1000:.1f} ms; checkpoint/stash ratio "
            f"{p50 / statistics.median(st):.2f}x"
        )
        print(
            f"CPU per operation (user+sys, load-independent): checkpoint p50 "
            f"{statistics.median(res.ours_cpu) * 1000:.1f} ms, `git stash create` p50 "
            f"{statistics.median(res.stash_cpu) * 1000:.1f} ms"
        )
        print(
            f"views.changes on the big tree: {res.changes * 1000:.0f} ms "
            f"({res.changed_files} files changed); rollback: {res.rollback * 1000:.0f} ms"
        )
        print(f"load average at the end: {loadavg()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
