"""The gate's object reads done in-process (libgit2) give git's answers."""

from __future__ import annotations

import os
from pathlib import Path

from synthorg.workspace.objects import changed_regular_files, gitlink_paths, object_sizes

from .gitfixtures import git, make_repo


def test_changed_files_sizes_and_gitlinks_match_git(tmp_path: Path) -> None:
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
    found = changed_regular_files(common, base, tree)
    assert sorted(found) == sorted(expected)
    assert {path for path, _ in found} == {"a.txt", "d/new.txt", "run.sh"}

    sizes = object_sizes(common, [sha for _, sha in found])
    for _, sha in found:
        assert sizes[sha] == int(git(repo, "cat-file", "-s", sha))
    assert gitlink_paths(common, tree) == ["vendor/sub"]
    assert gitlink_paths(common, base) == []
