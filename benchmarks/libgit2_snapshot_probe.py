"""Would libgit2 (pygit2) snapshot a hostile worktree as git does? A probe, not a benchmark.

    uv run python benchmarks/libgit2_snapshot_probe.py [--sparse-bytes 1073741824] [--nested]

Builds a throwaway repository with what an agent can plant (filter and diff drivers named by
``.gitattributes`` and defined in the repository config, eol/ident/text=auto attributes,
absolute and relative symlinks, an executable, a newline and a non-UTF-8 name, an ignored
file, a sparse file, with ``--nested`` an embedded repository), snapshots it with git as
``workspace.snapshot`` runs it (hardened env, disarmed drivers, a private non-split index) and
with libgit2 (``Index.add_all`` + ``write_tree``, no global/system config), and prints both
trees, any entry only one has, whether a driver program ran, and libgit2's CPU and peak RSS.

Why it exists: the checkpoint's ``git add -A`` + ``write-tree`` stay processes because
pygit2 cannot give a repository a private index (no ``git_repository_set_index``) and
libgit2 cannot read a split index; this records what else an in-process snapshot must
handle before it can replace them (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import pygit2
from pygit2.enums import ConfigLevel, RepositoryOpenFlag

from synthorg.workspace.git import driver_overrides, git_env, run_git_sync


def _plant(repo: Path, marker: Path, sparse_bytes: int, nested: bool) -> None:
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    with (repo / ".git" / "config").open("a") as config:
        for key in ("clean", "smudge", "process"):
            config.write(f'[filter "evil"]\n\t{key} = touch {marker}-{key}\n')
        config.write(
            f'[filter "evil"]\n\trequired = true\n[diff "evil"]\n\ttextconv = touch {marker}\n'
        )
    (repo / ".gitattributes").write_text(
        "*.ev filter=evil diff=evil\n*.crlf text eol=crlf\n*.id ident\n* text=auto\n"
    )
    (repo / "a.ev").write_text("evil\n")
    (repo / "b.crlf").write_bytes(b"one\r\ntwo\n")
    (repo / "c.id").write_text("$Id$\n")
    (repo / "d.txt").write_bytes(b"mixed\r\nlines\n")
    os.symlink("/etc/passwd", repo / "abs-link")
    os.symlink("a.ev", repo / "rel-link")
    (repo / "x.sh").write_text("#!/bin/sh\n")
    (repo / "x.sh").chmod(0o755)
    (repo / "odd\nname").write_text("n\n")
    (repo / os.fsdecode(b"\xff\xfe.bin")).write_bytes(b"\0\1")
    (repo / "-dash").write_text("d\n")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "x.log").write_text("ignored\n")
    with (repo / "big.sparse").open("wb") as big:
        big.truncate(sparse_bytes)
    if nested:
        sub = repo / "sub"
        ident = ["-c", "user.name=a", "-c", "user.email=a@b.invalid"]
        subprocess.run(["git", "init", "-q", str(sub)], check=True)
        (sub / "f").write_text("f\n")
        subprocess.run(["git", "-C", str(sub), *ident, "add", "f"], check=True)
        subprocess.run(["git", "-C", str(sub), *ident, "commit", "-qm", "x"], check=True)


def _git_tree(root: Path, repo: Path) -> str:
    names = run_git_sync(["config", "--list", "--name-only", "-z"], repo).text.split("\0")
    extra = {
        "GIT_INDEX_FILE": str(root / "git.index"),
        "GIT_DIR": str(repo / ".git"),
        "GIT_WORK_TREE": str(repo),
    }
    env = git_env(extra, overrides=driver_overrides(names))
    add = subprocess.run(["git", "add", "-A"], cwd=repo, env=env, capture_output=True)
    if add.returncode != 0:
        return f"error: {add.stderr.decode(errors='replace').strip()}"
    done = subprocess.run(["git", "write-tree"], cwd=repo, env=env, capture_output=True)
    return done.stdout.decode().strip()


def _libgit2_tree(root: Path, repo: Path) -> tuple[str, float]:
    for level in (ConfigLevel.GLOBAL, ConfigLevel.SYSTEM, ConfigLevel.XDG):
        pygit2.settings.search_path[level] = str(root / "no-config")
    lg = pygit2.Repository(str(repo / ".git"), RepositoryOpenFlag.NO_SEARCH)
    start = time.process_time()
    try:
        lg.index.add_all()
        lg.index.write()
        tree = str(lg.index.write_tree())
    except pygit2.GitError as exc:
        tree = f"error: {exc}"
    return tree, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sparse-bytes", type=int, default=1 << 20)
    parser.add_argument("--nested", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="synthorg-libgit2-probe-") as tmp:
        root = Path(tmp)
        repo, marker = root / "repo", root / "driver-ran"
        _plant(repo, marker, args.sparse_bytes, args.nested)
        git_tree = _git_tree(root, repo)
        lg_tree, cpu = _libgit2_tree(root, repo)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        print(f"git tree:     {git_tree}\nlibgit2 tree: {lg_tree}")
        print(f"libgit2 add_all + write_tree: {cpu * 1000:.1f} ms CPU, peak RSS {peak} MiB")
        print(f"driver programs that ran: {sorted(p.name for p in root.glob('driver-ran*'))}")
        if not git_tree.startswith("error") and not lg_tree.startswith("error"):
            listed = [
                set(run_git_sync(["ls-tree", "-r", "-z", t], repo).text.split("\0"))
                for t in (git_tree, lg_tree)
            ]
            print(f"only git: {sorted(listed[0] - listed[1])}")
            print(f"only libgit2: {sorted(listed[1] - listed[0])}")


if __name__ == "__main__":
    main()
