"""The quota's in-process copy-back of plain changes, and what it leaves to rsync.

``copy_back_plain`` gets the list quota._changed makes (``dir/.`` for a directory whose
entries changed) and either copies every entry as rsync would (content, mode without
set-id bits or world write, owner, mtime) or writes nothing and says so.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from synthorg.sandbox.copyback import copy_back_plain


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    image, worktree = tmp_path / "image", tmp_path / "worktree"
    for root in (image, worktree):
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "calc.py").write_text("x = 1\n")
        (root / "README").write_text("hello\n")
    return image, worktree


def test_edits_and_new_files_and_dirs_are_copied_as_rsync_would(
    trees: tuple[Path, Path],
) -> None:
    image, worktree = trees
    (image / "pkg" / "calc.py").write_text("x = 2\n")
    (image / "pkg" / "__pycache__" / "deep").mkdir(parents=True)
    (image / "pkg" / "__pycache__" / "calc.pyc").write_bytes(b"\0bytecode")
    (image / "pkg" / "__pycache__" / "deep" / "d.txt").write_text("d\n")
    (image / "tool.sh").write_text("#!/bin/sh\n")
    (image / "tool.sh").chmod(0o6777)  # set-id and world-writable: stripped on the host
    os.utime(image / "pkg" / "calc.py", ns=(1_000_000_000, 1_500_000_000))
    changed = [
        "./.",
        "pkg/.",
        "pkg/calc.py",
        "pkg/__pycache__/.",
        "pkg/__pycache__/calc.pyc",
        "pkg/__pycache__/deep/.",
        "pkg/__pycache__/deep/d.txt",
        "tool.sh",
    ]
    assert copy_back_plain(image, worktree, changed[::-1])  # in any order: dirs first
    assert (worktree / "pkg" / "calc.py").read_text() == "x = 2\n"
    assert (worktree / "pkg" / "calc.py").stat().st_mtime_ns == 1_500_000_000
    assert (worktree / "pkg" / "__pycache__" / "calc.pyc").read_bytes() == b"\0bytecode"
    assert (worktree / "pkg" / "__pycache__" / "deep" / "d.txt").read_text() == "d\n"
    assert stat.S_IMODE((worktree / "tool.sh").stat().st_mode) == 0o775
    assert sorted(os.listdir(worktree)) == ["README", "pkg", "tool.sh"]  # no temp files left


def test_same_content_keeps_the_file_and_takes_the_attributes(trees: tuple[Path, Path]) -> None:
    image, worktree = trees
    before = (worktree / "README").stat().st_ino
    (image / "README").chmod(0o600)
    assert copy_back_plain(image, worktree, ["README"])
    after = (worktree / "README").stat()
    assert after.st_ino == before and stat.S_IMODE(after.st_mode) == 0o600


@pytest.mark.parametrize("change", ["deleted", "symlink", "hard link", "sparse", "dir for file"])
def test_what_only_rsync_copies_faithfully_is_left_to_it_untouched(
    trees: tuple[Path, Path], change: str
) -> None:
    image, worktree = trees
    (image / "new.txt").write_text("new\n")
    listed = ["./.", "new.txt"]
    if change == "deleted":
        (image / "README").unlink()
    elif change == "symlink":
        (image / "link").symlink_to("/etc/passwd")
        listed.append("link")
    elif change == "hard link":
        os.link(image / "new.txt", image / "alias.txt")
        listed.append("alias.txt")
    elif change == "sparse":
        with open(image / "holes.bin", "wb") as fh:
            fh.truncate(64 * 1024**2)
        listed.append("holes.bin")
    else:
        (image / "README").unlink()
        (image / "README").mkdir()
        listed.append("README/.")
    assert not copy_back_plain(image, worktree, listed)
    assert not (worktree / "new.txt").exists()  # nothing written: rsync copies the whole list
    assert (worktree / "README").read_text() == "hello\n"


def test_a_symlink_in_the_worktree_is_never_followed(tmp_path: Path) -> None:
    image, worktree, outside = tmp_path / "image", tmp_path / "worktree", tmp_path / "outside"
    (image / "sub").mkdir(parents=True)
    (image / "sub" / "x.txt").write_text("pwned\n")
    worktree.mkdir()
    outside.mkdir()
    (worktree / "sub").symlink_to(outside)  # e.g. a symlink committed in the repository
    assert not copy_back_plain(image, worktree, ["sub/x.txt"])
    assert not copy_back_plain(image, worktree, ["sub/.", "sub/x.txt"])
    assert os.listdir(outside) == []


def test_many_changes_are_left_to_rsync(trees: tuple[Path, Path]) -> None:
    image, worktree = trees
    names = [f"f{n}.txt" for n in range(501)]
    for name in names:
        (image / name).write_text(name)
    assert not copy_back_plain(image, worktree, ["./.", *names])
    assert not (worktree / "f0.txt").exists()
