"""The gate's object reads done in-process (libgit2) give git's answers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from synthorg.workspace.blobs import new_blobs
from synthorg.workspace.objects import InProcessUnavailable, commit_and_create_ref, object_sizes
from synthorg.workspace.views import _parse_raw_numstat

from .gitfixtures import git, make_repo


def test_new_blobs_sizes_and_gitlinks_match_git(tmp_path: Path) -> None:
    repo = tmp_path / "proj"
    base = make_repo(repo, {"a.txt": b"a\n", "gone.txt": b"b\n", "d/c.txt": b"c\n"})
    (repo / "a.txt").write_text("changed\n")
    (repo / "gone.txt").unlink()
    (repo / "d" / "new.txt").write_text("n" * 1000)
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    os.symlink("a.txt", repo / "link")
    git(repo, "add", "-A")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{base},vendor/sub")
    tree = git(repo, "write-tree").strip()
    common = repo / ".git"

    raw = git(repo, "diff-tree", "-r", "-z", "--raw", "--no-renames", base, tree).split("\0")
    expected = [
        (path, meta.split()[3])
        for meta, path in zip(raw[0::2], raw[1::2], strict=False)
        if meta.split()[4] != "D" and meta.split()[1] in ("100644", "100755")
    ]
    args = ["diff-tree", "--ignore-submodules=none", "-r", "-z", "-M", "--raw", "--numstat"]
    _, entries = _parse_raw_numstat(git(repo, *args, base, tree))
    found = [(b.path, b.sha) for b in new_blobs(entries)]
    assert sorted(found) == sorted(expected)
    assert {path for path, _ in found} == {"a.txt", "d/new.txt", "run.sh"}

    sizes = object_sizes(common, [sha for _, sha in found])
    for _, sha in found:
        assert sizes[sha] == int(git(repo, "cat-file", "-s", sha))
    # The gate's nested-repository rule reads the same entries: the gitlink is listed.
    assert [e.path for e in entries if e.mode == "160000"] == ["vendor/sub"]


def _mapped(under: Path) -> list[str]:
    """Files under ``under`` this process has open or mapped (libgit2 maps a read pack)."""
    fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}")]  # fmt: skip
    maps = [line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()]
    return [path for path in fds + maps if path.startswith(str(under))]


def test_a_failed_checkpoint_write_frees_the_repository(tmp_path: Path) -> None:
    """Objects that cannot be written (a read-only objects dir: libgit2 1.9 drops that write
    error and answers an oid) end as InProcessUnavailable, the caller's cue to run git, with
    no ref made and nothing of the repository left open or mapped."""
    repo = tmp_path / "proj"
    head = make_repo(repo, {"a.txt": b"a\n"})
    git(repo, "repack", "-a", "-d", "-q")  # read from a pack: mapped while the repo is open
    objects = repo / ".git" / "objects"
    subprocess.run(["mount", "--bind", str(objects), str(objects)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(objects)], check=True)
        with pytest.raises(InProcessUnavailable):
            commit_and_create_ref(repo / ".git", tree=git(repo, "rev-parse", "HEAD^{tree}").strip(),
                                  parent=head, message="m", ref="refs/synthorg/c/0",
                                  identity=("n", "n@example.test"))  # fmt: skip
        assert _mapped(objects) == []
    finally:
        subprocess.run(["umount", "-l", str(objects)], check=True)
    assert git(repo, "for-each-ref", "refs/synthorg/").strip() == ""
