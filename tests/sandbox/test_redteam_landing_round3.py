"""Red team, round 3 (a9c18a9, c5c2325), through real governed runs: the landing's tree
edited in-process at the paths the overlay's upper names must be what a full scan of the
final worktree gives, and the user's index must match HEAD after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.sandbox.quota import unavailable_reason

from .test_landing_from_overlay import _git, _repo
from .test_redteam_landing import _check_landed, _run

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]


def _repo_with_submodule(tmp_path: Path) -> Path:
    """The demo repository with a gitlink ``vendor/sub`` (a submodule a worktree leaves
    uninitialised: an empty directory)."""
    repo = _repo(tmp_path)
    target = _git(repo, "rev-parse", "HEAD").strip()
    (repo / ".gitmodules").write_text('[submodule "sub"]\n\tpath = vendor/sub\n\turl = ./x\n')
    _git(repo, "add", ".gitmodules")
    _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{target},vendor/sub")
    _git(repo, "commit", "-qm", "a submodule")
    return repo


async def test_a_file_written_into_an_uninitialised_submodule(tmp_path: Path, quotas: Path) -> None:
    """The agent writes into the submodule's empty directory (the upper names only
    ``vendor/sub/evil.txt``: the directory is the lower's, copied up) and edits a file. A
    full scan keeps the gitlink and adds nothing inside it."""
    repo = _repo_with_submodule(tmp_path)
    plan = [
        "cd /workspace && ls -a vendor/sub && echo evil > vendor/sub/evil.txt"
        " && echo edited >> top.txt && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan, repo)
    sha = _check_landed(worktree, tmp_path, out, result)
    listed = _git(worktree, "ls-tree", sha, "vendor/sub").split()
    assert listed[:2] == ["160000", "commit"], listed
