"""Which index files libgit2 can read: git's own plain ones, never a split or sparse one."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.workspace.git import run_git_sync
from synthorg.workspace.index_file import libgit2_readable

from .gitfixtures import make_repo


def _index(repo: Path, path: Path, *args: str) -> Path:
    """The index ``git <args>`` writes for ``repo`` into ``path`` (a private index file)."""
    run_git_sync(list(args), repo, env={"GIT_INDEX_FILE": str(path)})
    return path


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_plain_indexes_of_every_version_are_readable(tmp_path: Path, version: str) -> None:
    repo = tmp_path / "proj"
    long = "/".join(c * 250 for c in "abcde")  # over 4,095 bytes: the name length overflows
    make_repo(repo, {"a.txt": b"a\n", f"{long}/f.txt": b"f\n", "d/b.txt": b"b\n"})
    config = ["-c", f"index.version={version}", "-c", "core.untrackedCache=true"]
    path = _index(repo, tmp_path / "idx", *config, "-c", "core.splitIndex=false", "add", "-A")
    assert libgit2_readable(path)


def test_split_intent_to_add_truncated_and_foreign_files_are_not(tmp_path: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n", "b.txt": b"b\n"})
    assert not libgit2_readable(
        _index(repo, tmp_path / "split", "-c", "core.splitIndex=true", "add", "-A")
    )
    (repo / "new.txt").write_text("n\n")
    assert not libgit2_readable(_index(repo, tmp_path / "ita", "add", "-N", "new.txt"))
    plain = _index(repo, tmp_path / "plain", "-c", "core.splitIndex=false", "add", "-A")
    assert libgit2_readable(plain)
    cut = tmp_path / "cut"
    cut.write_bytes(plain.read_bytes()[:-30])
    assert not libgit2_readable(cut)
    other = tmp_path / "other"
    other.write_bytes(b"PACK" + bytes(40))
    assert not libgit2_readable(other)
    assert not libgit2_readable(tmp_path / "missing")
