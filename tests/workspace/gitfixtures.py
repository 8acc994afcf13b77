"""Helpers that build real git repositories for the workspace tests."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from synthorg.workspace.git import run_git_sync


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` and return its stdout (raises on failure)."""
    return run_git_sync(list(args), cwd).text


def write_files(root: Path, files: Mapping[str, bytes]) -> None:
    """Write ``files`` (relative path -> content) under ``root``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def make_repo(path: Path, files: Mapping[str, bytes], *, branch: str = "main") -> str:
    """A fresh repository at ``path`` with ``files`` committed; returns the commit sha."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    write_files(path, files)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return git(path, "rev-parse", "HEAD").strip()


def tree_state(root: Path, *, include_ignored: bool = False) -> dict[str, tuple[bytes, bool]]:
    """Every file under ``root`` outside .git: path -> (content, executable)."""
    ignored = set(ignored_files(root)) if not include_ignored else set()
    state: dict[str, tuple[bytes, bool]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            if name == ".git":
                continue
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if rel in ignored:
                continue
            mode = full.lstat().st_mode
            if stat.S_ISLNK(mode):
                state[rel] = (os.readlink(full).encode(), False)
            else:
                state[rel] = (full.read_bytes(), bool(mode & stat.S_IXUSR))
    return state


def ignored_files(root: Path) -> list[str]:
    """Untracked files git ignores under ``root``."""
    out = git(root, "ls-files", "-z", "--others", "--ignored", "--exclude-standard")
    return [p for p in out.split("\0") if p]


def index_bytes(git_dir: Path) -> bytes:
    """The raw user index of a checkout (to prove it was not touched)."""
    return (git_dir / "index").read_bytes()


def worktree_count(repo: Path) -> int:
    """How many worktrees (main one included) git has registered."""
    out = git(repo, "worktree", "list", "--porcelain")
    return sum(1 for line in out.splitlines() if line.startswith("worktree "))


def commit_shape(repo: Path, sha: str) -> list[str]:
    """The commit's header and message, without the two timestamps."""
    raw = git(repo, "cat-file", "commit", sha)
    return [
        " ".join(line.split(" ")[:-2]) if line.startswith(("author ", "committer ")) else line
        for line in raw.splitlines()
    ]


def logging_git(bindir: Path, log: Path) -> str:
    """A ``git`` in ``bindir`` that appends its arguments to ``log`` and runs the real git;
    the ``PATH`` value that puts it first."""
    bindir.mkdir(parents=True, exist_ok=True)
    wrapper = bindir / "git"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\nexec /usr/bin/git "$@"\n')
    wrapper.chmod(0o755)
    return f"{bindir}{os.pathsep}{os.environ['PATH']}"
