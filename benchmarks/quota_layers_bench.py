"""The worktree quota's per-run cost on repositories of 100 to 100,000 files: this tree's
overlay (nothing copied in, the upper applied back) vs a baseline revision's full copy
(``mkfs.ext4 -d`` in, changed-only copy back), measured in the same run (issue 31).

Run (root): uv run python benchmarks/quota_layers_bench.py [--files 100,10000,100000]
[--runs 5] [--baseline b287732]

Per round and implementation: mount the quota over the tree, make one same-size edit and
one new file (a run's fix), release (copy back, unmount). Also timed, once per size: the
sandbox start's ``grant_tree`` walk (the same in both: the tree handed to the sandbox uid),
which is what is left that reads the whole tree. Implementations and sizes interleave round
by round so machine load hits them alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sandbox_bench import load_quota

from synthorg.sandbox import SandboxLimits, quota
from synthorg.sandbox.identity import grant_tree, resolve_identity


def make_tree(path: Path, files: int) -> None:
    """``files`` small files in directories of 100, and a .git file like a worktree's."""
    path.mkdir()
    (path / ".git").write_text("gitdir: /nowhere/.git/worktrees/x\n")
    for i in range(files):
        sub = path / f"d{i // 100:04d}"
        if i % 100 == 0:
            sub.mkdir()
        (sub / f"f{i % 100:03d}.txt").write_text(f"file {i}\n")


def one_round(impl: object, tree: Path, allowance: int) -> tuple[float, float]:
    """(mount, release) seconds of one run's quota with a same-size edit and a new file."""
    edited = tree / "d0000" / "f000.txt"
    text = edited.read_bytes()
    started = time.perf_counter()
    held = impl.WorkspaceQuota.mount(tree, allowance)  # type: ignore[attr-defined]
    mounted = time.perf_counter()
    edited.write_bytes(text.swapcase())
    (tree / "new.txt").write_text("new\n")
    held.release()
    released = time.perf_counter()
    assert edited.read_bytes() == text.swapcase(), "the edit did not come back"
    edited.write_bytes(text)
    (tree / "new.txt").unlink()
    return mounted - started, released - mounted


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", default="100,10000,100000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", default="b287732")
    args = parser.parse_args()
    if os.geteuid() != 0 or quota.unavailable_reason() is not None:
        print(f"quota unavailable: {quota.unavailable_reason()}")
        return 1
    sizes = [int(n) for n in args.files.split(",")]
    allowance = SandboxLimits().disk_bytes or 0
    print(f"load average {os.getloadavg()} on {os.cpu_count()} cpus")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as raw:
        tmp = Path(raw)
        impls = {"this tree": quota, f"baseline {args.baseline}": load_quota(args.baseline, tmp)}
        trees = {n: tmp / f"tree-{n}" for n in sizes}
        for n, tree in trees.items():
            make_tree(tree, n)
        identity = resolve_identity()
        grant: dict[int, float] = {}
        for n, tree in trees.items():
            grant_tree(tree, identity, keep_top=True)  # the first run chowns; time a later one
            started = time.perf_counter()
            grant_tree(tree, identity, keep_top=True)
            grant[n] = time.perf_counter() - started
        times: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for _ in range(args.runs):
            for n in sizes:
                for name, impl in impls.items():
                    times.setdefault((name, n), []).append(one_round(impl, trees[n], allowance))
    print(f"\n{'quota.py':<18} {'files':>7} {'mount p50':>10} {'release p50':>12} "
          f"{'total p50':>10}   ({args.runs} rounds each, interleaved)")  # fmt: skip
    totals = {}
    for (name, n), measured in sorted(times.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        mount = statistics.median(m for m, _ in measured) * 1000
        release = statistics.median(r for _, r in measured) * 1000
        totals[(name, n)] = statistics.median(m + r for m, r in measured) * 1000
        print(f"{name:<18} {n:>7} {mount:8.1f}ms {release:10.1f}ms {totals[(name, n)]:8.1f}ms")
    small, large = min(sizes), max(sizes)
    for name in impls:
        ratio = totals[(name, large)] / totals[(name, small)]
        print(f"{name}: {large} files cost {ratio:.2f}x of {small}")
    for n, seconds in grant.items():
        print(
            f"grant_tree walk (both revisions, every sandbox start), {n} files: "
            f"{seconds * 1000:.1f} ms"
        )
    print(f"load average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
