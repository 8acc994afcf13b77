"""Ref reads of a source repository answered in-process (libgit2) agree with git's answers."""

from __future__ import annotations

import subprocess
from pathlib import Path

from synthorg.workspace.objects import refs_in_process
from synthorg.workspace.repo import (
    branch_exists,
    current_branch,
    remember_base,
    resolve_commit,
)

from .gitfixtures import git, make_repo


def _git_commit(repo: Path, rev: str) -> str | None:
    done = subprocess.run(
        ["git", "rev-parse", "-q", "--verify", f"{rev}^{{commit}}"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or None


async def test_head_branch_and_refs_match_git_packed_loose_detached_and_unborn(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "proj"
    head = make_repo(repo, {"a.txt": b"a\n"})
    git(repo, "tag", "-a", "-m", "annotated", "v1")  # peeled to its commit
    git(repo, "update-ref", "refs/synthorg/base/conv-x", head)
    git(repo, "branch", "side")
    git(repo, "pack-refs", "--all")  # packed-refs, not loose files
    git(repo, "update-ref", "refs/synthorg/base/conv-loose", head)

    for rev in (
        "HEAD",
        "refs/tags/v1",
        "refs/synthorg/base/conv-x",
        "refs/synthorg/base/conv-loose",
    ):
        assert await resolve_commit(repo, rev) == _git_commit(repo, rev) == head
    assert await resolve_commit(repo, "refs/synthorg/base/conv-none") is None
    assert await current_branch(repo) == "main"
    # Answered by libgit2 itself (not by the git fallback):
    assert refs_in_process(repo, lambda lib: lib.current_branch()) == "main"
    assert refs_in_process(repo, lambda lib: lib.commit_of("refs/tags/v1")) == head
    assert await branch_exists(repo, "side") and await branch_exists(repo, "main")
    assert not await branch_exists(repo, "nope")

    await remember_base(repo, "conv-new", head)  # written by libgit2, read back by git
    assert _git_commit(repo, "refs/synthorg/base/conv-new") == head

    git(repo, "checkout", "-q", "--detach")
    assert await current_branch(repo) is None
    assert await resolve_commit(repo, "HEAD") == head

    git(repo, "checkout", "-q", "--orphan", "fresh")  # unborn: a name, no commit
    assert await current_branch(repo) == "fresh"
    assert await resolve_commit(repo, "HEAD") is None
