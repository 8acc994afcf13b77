"""Workspaces that travel: the cost of publishing to a remote, and of a move to another worker.

Baselines in the same run, on the same generated repository:
- a checkpoint published to the remote (``git daemon`` on loopback) vs the same checkpoint
  kept local (``CheckpointStore()`` on a worktree of a local repository);
- a resume on a worker that never saw the conversation (fetch, worktree, restore of the
  remote's newest checkpoint) vs making a new worktree from a local repository.

Run: ``uv run python benchmarks/travel_bench.py [--files 2000] [--rounds 15]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.mirror import Mirrors
from synthorg.workspace.remote import ProjectRemote
from synthorg.workspace.worktrees import WorktreeManager
from tests.gitremote import GitDaemon

os.environ.update(
    GIT_AUTHOR_NAME="Bench",
    GIT_AUTHOR_EMAIL="bench@example.test",
    GIT_COMMITTER_NAME="Bench",
    GIT_COMMITTER_EMAIL="bench@example.test",
    GIT_CONFIG_NOSYSTEM="1",
)


def _repo(path: Path, files: int) -> None:
    for n in range(files):
        target = path / f"pkg{n % 50}" / f"mod{n}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"VALUE = {n}\n" * 20)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "gen"]):
        subprocess.run(["git", "-C", str(path), *args], check=True)


async def _timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return (time.perf_counter() - start) * 1000


async def main(files: int, rounds: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="travel-bench-"))
    _repo(root / "src", files)
    daemon = GitDaemon(root / "served")
    daemon.start()
    try:
        daemon.publish("app", root / "src")
        project = {"app": ProjectRemote(remote=daemon.url("app"))}
        local_wt = WorktreeManager(root / "local-home")
        mirrors = Mirrors(root / "a", project)
        remote_wt = WorktreeManager(root / "a", mirrors=mirrors)
        mirror = mirrors.prepare()["app"]
        local_ws = await local_wt.create(root / "src", "conv-local")
        remote_ws = await remote_wt.create(mirror, "conv-remote")
        kept, published = CheckpointStore(), CheckpointStore(publisher=mirrors)
        local_ms, remote_ms = [], []
        for n in range(rounds):
            for ws, store, out in ((local_ws, kept, local_ms), (remote_ws, published, remote_ms)):
                (ws.path / "pkg0" / "mod0.py").write_text(f"edit {n}\n")
                out.append(await _timed(lambda ws=ws, store=store: store.create(ws)))
        lp, rp = statistics.median(local_ms), statistics.median(remote_ms)
        print(f"checkpoint, {files} files: local p50 {lp:.1f} ms, published p50 {rp:.1f} ms")
        print(f"  publish adds {rp - lp:.1f} ms -> {rp / lp:.2f}x")

        make_ms, move_ms = [], []
        for n in range(max(3, rounds // 3)):
            make_ms.append(await _timed(lambda n=n: local_wt.create(root / "src", f"conv-m{n}")))
            other = Mirrors(root / f"b{n}", project)
            moved = WorktreeManager(root / f"b{n}", mirrors=other)
            path = other.prepare()["app"]
            info = remote_ws.info()
            move_ms.append(
                await _timed(lambda m=moved, p=path, i=info: m.resume(p, "conv-remote", i))
            )
        mp, vp = statistics.median(make_ms), statistics.median(move_ms)
        print(f"move to a fresh worker (fetch, worktree, restore): p50 {vp:.0f} ms")
        print(f"  vs a new local worktree p50 {mp:.0f} ms -> {vp / mp:.2f}x")
        print(f"load average: {os.getloadavg()}")
    finally:
        daemon.stop()
        subprocess.run(["rm", "-rf", str(root)], check=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    asyncio.run(main(args.files, args.rounds))
