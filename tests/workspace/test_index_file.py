"""Which index files libgit2 can read: git's own plain ones, never a split or sparse one."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.workspace.git import run_git_sync
from synthorg.workspace.index_file import libgit2_readable, reowned, shared_in

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


def _owners(repo: Path, index: Path) -> set[tuple[int, int]]:
    """The (uid, gid) each entry of index records, as git itself reads them."""
    out = run_git_sync(["ls-files", "--debug"], repo, env={"GIT_INDEX_FILE": str(index)}).text
    uids = [int(line.split()[1]) for line in out.splitlines() if line.strip().startswith("uid:")]
    gids = [int(line.split()[3]) for line in out.splitlines() if line.strip().startswith("uid:")]
    return set(zip(uids, gids, strict=True))


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_reowned_records_the_new_owner_and_git_reads_it(tmp_path: Path, version: str) -> None:
    """Every entry of the host's owner is recorded as the idmapped view's; git verifies the
    checksum and reads every entry (long names and intent-to-add ones included)."""
    repo = tmp_path / "proj"
    long = "/".join(c * 250 for c in "abcde")
    make_repo(repo, {"a.txt": b"a\n", f"{long}/f.txt": b"f\n", "d/b.txt": b"b\n"})
    (repo / "new.txt").write_text("n\n")
    config = ["-c", f"index.version={version}", "-c", "core.splitIndex=false"]
    path = _index(repo, tmp_path / "idx", *config, "add", "-A")
    if version != "2":
        _index(repo, path, *config, "add", "-N", "new.txt")
    host = _owners(repo, path)
    assert len(host) == 1
    (old,) = host
    new = (old[0] + 999, old[1] + 995)
    data = reowned(path.read_bytes(), old, new)
    assert data is not None
    path.write_bytes(data)
    assert _owners(repo, path) == {new}
    listed = run_git_sync(["ls-files"], repo, env={"GIT_INDEX_FILE": str(path)}).text.split()
    assert f"{long}/f.txt" in listed and "d/b.txt" in listed


def test_reowned_leaves_what_it_cannot_rewrite(tmp_path: Path) -> None:
    """A split index (its entries live in the shared one), a bad checksum, another file:
    None, and the caller keeps the copy git then refreshes by content."""
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n", "b.txt": b"b\n"})
    split = _index(repo, tmp_path / "split", "-c", "core.splitIndex=true", "add", "-A")
    assert reowned(split.read_bytes(), (0, 0), (1, 1)) is None
    plain = _index(repo, tmp_path / "plain", "-c", "core.splitIndex=false", "add", "-A")
    tampered = bytearray(plain.read_bytes())
    tampered[-1] ^= 0xFF
    assert reowned(bytes(tampered), (0, 0), (1, 1)) is None
    assert reowned(b"PACK" + bytes(40), (0, 0), (1, 1)) is None


def test_a_split_index_is_reowned_with_its_shared_index(tmp_path: Path) -> None:
    """A big worktree's own index is split: the seed of a run's view rewrites both halves
    (the shared one written under its new id in the git dir), and git reads every entry of
    the result as the new owner's; the original halves are left as they were."""
    repo = tmp_path / "proj"
    make_repo(repo, {f"d{i % 7}/f{i}.txt": f"{i}\n".encode() for i in range(60)})
    split = _index(repo, tmp_path / "split", "-c", "core.splitIndex=true", "add", "-A")
    (repo / "d1/f1.txt").write_text("changed\n")  # an entry the split part itself holds
    _index(repo, split, "-c", "core.splitIndex=true", "add", "d1/f1.txt")
    git_dir = repo / ".git"
    shared_before = {p.name: p.read_bytes() for p in git_dir.glob("sharedindex.*")}
    host = _owners(repo, split)
    assert len(host) == 1
    (old,) = host
    new = (old[0] + 999, old[1] + 995)
    data = reowned(split.read_bytes(), old, new, shared=shared_in(git_dir, old, new))
    assert data is not None
    moved = tmp_path / "moved"
    moved.write_bytes(data)
    assert _owners(repo, moved) == {new}
    listed = run_git_sync(["ls-files"], repo, env={"GIT_INDEX_FILE": str(moved)}).text.split()
    assert len(listed) == 60
    assert _owners(repo, split) == {old}  # the original still reads as it did
    for name, content in shared_before.items():
        assert (git_dir / name).read_bytes() == content
