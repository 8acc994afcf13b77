"""Read-only views after real edits: changes, diffs (binary, renames, untracked), commits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from synthorg.workspace import views
from synthorg.workspace.errors import NotAGitWorkspaceError
from synthorg.workspace.models import FileChange, Workspace
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, index_bytes, make_repo

LONG_TEXT = b"".join(f"line {i} of a file long enough to be a rename\n".encode() for i in range(40))
FILES = {
    ".gitignore": b"*.log\nbuild/\n",
    "keep.txt": b"one\ntwo\nthree\n",
    "gone.txt": b"to be deleted\n",
    "old_name.txt": LONG_TEXT,
    "img.bin": bytes(range(256)) * 4,
    "dir/nested.py": b"x = 1\n",
}


async def _edited_workspace(tmp_path: Path, home: Path) -> Workspace:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-v")
    root = ws.path
    (root / "keep.txt").write_bytes(b"one\n2\nthree\nfour\n")
    (root / "gone.txt").unlink()
    os.rename(root / "old_name.txt", root / "new_name.txt")  # a plain mv, not git mv
    (root / "img.bin").write_bytes(bytes(range(255, -1, -1)) * 4)
    (root / "new.bin").write_bytes(b"\x00\x01\x02binary\x00")
    (root / "dir" / "added.py").write_text("y = 2\n")
    (root / "debug.log").write_text("ignored\n")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_bytes(b"\x7fELF")
    return ws


async def test_changes_after_real_edits(tmp_path: Path, home: Path) -> None:
    ws = await _edited_workspace(tmp_path, home)
    assert ws.git_dir is not None
    # `git status` may refresh the index itself, so read it after status, not before.
    status_before = git(ws.path, "status", "--porcelain=v1", "-uall")
    index_before = index_bytes(ws.git_dir)

    found = {c.path: c for c in await views.changes(ws)}

    assert set(found) == {
        "keep.txt",
        "gone.txt",
        "new_name.txt",
        "img.bin",
        "new.bin",
        "dir/added.py",
    }
    assert found["keep.txt"] == FileChange(
        path="keep.txt", status="modified", additions=2, deletions=1
    )
    assert found["gone.txt"].status == "deleted" and found["gone.txt"].deletions == 1
    assert found["new_name.txt"].status == "renamed"
    assert found["new_name.txt"].old_path == "old_name.txt"
    assert found["img.bin"].status == "modified" and found["img.bin"].binary
    assert found["img.bin"].additions is None
    assert found["new.bin"].status == "added" and found["new.bin"].binary
    assert found["dir/added.py"] == FileChange(
        path="dir/added.py", status="added", additions=1, deletions=0
    )
    # Views are read-only: the user's index and status are exactly as before.
    assert index_bytes(ws.git_dir) == index_before
    assert git(ws.path, "status", "--porcelain=v1", "-uall") == status_before


async def test_unified_diff_whole_and_per_path(tmp_path: Path, home: Path) -> None:
    ws = await _edited_workspace(tmp_path, home)
    whole = await views.diff(ws)
    assert "diff --git a/keep.txt b/keep.txt" in whole
    assert "-two\n+2\n" in whole and "+four\n" in whole
    assert "rename from old_name.txt\nrename to new_name.txt" in whole
    assert "Binary files a/img.bin and b/img.bin differ" in whole
    assert "Binary files /dev/null and b/new.bin differ" in whole
    assert "+++ b/dir/added.py\n@@ -0,0 +1 @@\n+y = 2" in whole
    assert "deleted file mode 100644" in whole
    assert "debug.log" not in whole and "build/" not in whole

    one = await views.diff(ws, "keep.txt")
    assert one.startswith("diff --git a/keep.txt b/keep.txt")
    assert "img.bin" not in one and "added.py" not in one
    assert await views.diff(ws, "no/such/file") == ""


async def test_no_changes_is_empty(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-clean")
    assert await views.changes(ws) == []
    assert await views.diff(ws) == ""
    assert await views.commits(ws) == []


async def test_commits_since_base(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    ws = await WorktreeManager(home).create(repo, "conv-c")
    for n in (1, 2):
        (ws.path / f"f{n}.txt").write_text(f"{n}\n")
        git(ws.path, "add", f"f{n}.txt")
        git(ws.path, "commit", "-q", "-m", f"commit number {n}\n\nbody")
    # A commit on main after the base is not part of the conversation's history.
    git(repo, "commit", "-q", "--allow-empty", "-m", "unrelated")

    found = await views.commits(ws)
    assert [c.subject for c in found] == ["commit number 2", "commit number 1"]
    assert found[0].sha == git(ws.path, "rev-parse", "HEAD").strip()
    assert found[0].author_name == "Test Author"
    assert found[0].author_email == "author@example.test"
    assert found[0].date.tzinfo is not None
    # Committed changes still show against the base.
    assert {c.path for c in await views.changes(ws)} == {"f1.txt", "f2.txt"}


async def test_odd_file_names(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n"})
    ws = await WorktreeManager(home).create(repo, "conv-names")
    names = ["with space.txt", "tab\there.txt", "new\nline.txt", "ünï.txt", "*.txt"]
    for name in names:
        (ws.path / name).write_text("content\n")
    found = await views.changes(ws)
    assert sorted(c.path for c in found) == sorted(names)
    assert all(c.status == "added" for c in found)
    star = await views.diff(ws, "*.txt")  # literal, not a glob
    assert star.count("diff --git") == 1


async def test_views_need_a_worktree(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    plain = tmp_path / "plain"
    plain.mkdir()
    manager = WorktreeManager(home)
    for ws in (
        await manager.create(repo, "conv-inplace", enabled=False),
        await manager.create(plain, "conv-plain", enabled=False),
    ):
        index_before = index_bytes(repo / ".git")
        with pytest.raises(NotAGitWorkspaceError, match="not a git checkout"):
            await views.changes(ws)
        with pytest.raises(NotAGitWorkspaceError):
            await views.diff(ws)
        with pytest.raises(NotAGitWorkspaceError):
            await views.commits(ws)
        assert index_bytes(repo / ".git") == index_before


def test_parse_raw_numstat_copes_with_renames_and_binary() -> None:
    payload = (
        ":100644 100644 aaa bbb M\0b.bin\0"
        ":100644 100644 ccc ccc R100\0a b.txt\0c\td.txt\0"
        ":000000 100644 000 ddd A\0n.txt\0"
        "-\t-\tb.bin\0"
        "0\t0\t\0a b.txt\0c\td.txt\0"
        "3\t0\tn.txt\0"
    )
    parsed = views.parse_raw_numstat(payload)
    assert parsed == [
        FileChange(path="b.bin", status="modified", binary=True),
        FileChange(path="c\td.txt", old_path="a b.txt", status="renamed", additions=0, deletions=0),
        FileChange(path="n.txt", status="added", additions=3, deletions=0),
    ]
