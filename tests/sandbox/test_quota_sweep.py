"""Sweeping the quota of a dead host: concurrent sweepers must never lose the worktree.

Every CLI process sweeps stale quotas when its backend starts, so after a kill several
processes (a resume, other runs booting) sweep the same record at once. A sweeper that copies
back from the mount point after another one unmounted it would copy an empty directory over
the worktree with --delete (the worktree's .git vanished in a fault-injection run).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

from synthorg.sandbox.errors import SandboxStartError
from synthorg.sandbox.quota import _MARK_MARGIN_NS, WorkspaceQuota, unavailable_reason
from synthorg.sandbox.quota_sweep import sweep_stale

FILES = 1500
DIRS = 30

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"quota: {unavailable_reason()}"
)


def _emptied(root: Path, limit_s: float = 30.0) -> bool:
    """Whether root empties (bounded): a released quota's dir is deleted in the background."""
    deadline = time.monotonic() + limit_s
    while any(root.iterdir()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _orphan(worktree: Path, root: Path, write: Callable[[Path], None] | None = None) -> None:
    """A quota as a host killed mid-run leaves it: mounted, its owner SIGKILLed, with what
    ``write`` (by default many files) wrote inside."""
    script = (
        "import sys; from pathlib import Path; "
        "from synthorg.sandbox.quota import WorkspaceQuota; "
        f"WorkspaceQuota.mount(Path({str(worktree)!r}), 64 * 1024**2, root=Path({str(root)!r})); "
        "print('mounted', flush=True); sys.stdin.read()"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "mounted\n"
        (write or _write_inside)(worktree)
    finally:
        owner.kill()
        owner.wait()
        for pipe in (owner.stdout, owner.stdin):
            if pipe is not None:
                pipe.close()


def _write_inside(worktree: Path) -> None:
    (worktree / "written-inside.txt").write_text("kept\n")
    for d in range(DIRS):  # enough new content that copying it back takes a while
        (worktree / f"new{d}").mkdir()
        for i in range(FILES // DIRS):
            (worktree / f"new{d}" / f"{i}.txt").write_text(f"{d}/{i}\n")


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_sweeps_put_the_tree_back_exactly_once(tmp_path: Path, round_: int) -> None:
    worktree, root = tmp_path / "wt", tmp_path / "quota"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: /somewhere/.git/worktrees/wt\n")
    for i in range(FILES):
        (worktree / f"file{i}.txt").write_text(f"{i}\n" * 50)
    _orphan(worktree, root)
    try:
        _sweep_concurrently(worktree, root)
    finally:  # a failure must not leave mounts behind
        mounts = [*sorted(root.glob("*/merged")), *sorted(root.glob("*/mnt"), reverse=True)]
        for leftover in [worktree, *mounts]:
            while leftover.is_mount():
                subprocess.run(["umount", "-l", str(leftover)], check=False)


def _sweep_concurrently(worktree: Path, root: Path) -> None:
    assert worktree.is_mount()

    # Staggered starts explore the interleavings: a sweeper arriving while another copies
    # back, after it unmounted the worktree, after it unmounted the image.
    released: list[int] = []

    def sweeper(delay: float) -> None:
        time.sleep(delay)
        released.append(sweep_stale(root))

    threads = [threading.Thread(target=sweeper, args=(i * 0.01,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not worktree.is_mount()
    assert (worktree / ".git").read_text() == "gitdir: /somewhere/.git/worktrees/wt\n"
    assert (worktree / "written-inside.txt").read_text() == "kept\n"
    assert len(list(worktree.glob("file*.txt"))) == FILES
    assert len(list(worktree.glob("new*/*.txt"))) == FILES // DIRS * DIRS
    assert sum(released) == 1, released
    assert _emptied(root)


def test_sandboxes_of_one_process_share_the_worktree_quota(tmp_path: Path) -> None:
    """Two sandboxes on one worktree: one mount, released by the last (none stacked, none left)."""
    worktree, root = tmp_path / "wt", tmp_path / "quota"
    worktree.mkdir()
    (worktree / "a.txt").write_text("a\n")
    first = WorkspaceQuota.mount(worktree, 8 * 1024**2, root=root)
    second = WorkspaceQuota.mount(worktree, 8 * 1024**2, root=root)
    try:
        assert second is first
        assert sum(1 for line in Path("/proc/self/mountinfo").read_text().splitlines()
                   if f" {worktree} " in line) == 1  # fmt: skip
        (worktree / "b.txt").write_text("b\n")
        first.release()
        assert worktree.is_mount(), "the other sandbox still works on it"
        second.release()
        assert not worktree.is_mount()
        assert (worktree / "b.txt").read_text() == "b\n"
        assert _emptied(root)
    finally:
        while worktree.is_mount():
            subprocess.run(["umount", "-l", str(worktree)], check=False)


def test_a_covered_quota_never_copies_its_stale_image_over_the_live_tree(tmp_path: Path) -> None:
    """A zombie's quota released under its successor's: deferred, and the tree ends as theirs.

    (A worker stopped mid-run, its run taken over by another that mounted its own quota over
    the same worktree; then the zombie resumes and tears down.)
    """
    worktree, root = tmp_path / "wt", tmp_path / "quota"
    worktree.mkdir()
    (worktree / "f.txt").write_text("base\n")
    zombie = WorkspaceQuota.mount(worktree, 8 * 1024**2, root=root)
    (worktree / "f.txt").write_text("zombie's stale edit\n")
    script = (
        "import sys; from pathlib import Path; "
        "from synthorg.sandbox.quota import WorkspaceQuota; "
        f"q = WorkspaceQuota.mount(Path({str(worktree)!r}), 8 * 1024**2, "
        f"root=Path({str(root)!r})); print('mounted', flush=True); "
        "sys.stdin.readline(); q.release(); print('released', flush=True)"
    )
    successor = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert successor.stdout is not None and successor.stdin is not None
        assert successor.stdout.readline() == "mounted\n"
        (worktree / "f.txt").write_text("successor's edit\n")
        (worktree / "new.txt").write_text("successor's new file\n")

        with pytest.raises(SandboxStartError, match="covered by another quota"):
            zombie.release()
        assert (worktree / "f.txt").read_text() == "successor's edit\n"

        successor.stdin.write("go\n")
        successor.stdin.flush()
        assert successor.stdout.readline() == "released\n"
        assert sweep_stale(root) == 1  # the zombie's, now uncovered
        assert not worktree.is_mount()
        assert (worktree / "f.txt").read_text() == "successor's edit\n"
        assert (worktree / "new.txt").read_text() == "successor's new file\n"
        assert _emptied(root)
    finally:
        successor.kill()
        successor.wait()
        for pipe in (successor.stdout, successor.stdin):
            if pipe is not None:
                pipe.close()
        mounts = [*sorted(root.glob("*/merged")), *sorted(root.glob("*/mnt"), reverse=True)]
        for leftover in [worktree, *mounts]:
            while leftover.is_mount():
                subprocess.run(["umount", "-l", str(leftover)], check=False)


def test_a_same_size_edit_with_the_same_mtime_comes_back(tmp_path: Path) -> None:
    """The copy back compares content, not size and mtime (both the sandbox's to set).

    A same-size edit within the second the worktree was made (runs are that fast) was
    skipped by rsync's size+mtime check: the run's fix never reached the worktree and the
    run was judged NO_OP. Forging the mtime makes that case deterministic.
    """
    worktree, root = tmp_path / "wt", tmp_path / "quota"
    worktree.mkdir()
    original = worktree / "calc.py"
    original.write_text("return a - b\n")
    before = original.stat()
    quota = WorkspaceQuota.mount(worktree, 8 * 1024**2, root=root)
    try:
        original.write_text("return a + b\n")
        os.utime(original, ns=(before.st_atime_ns, before.st_mtime_ns))
        quota.release()
        assert original.read_text() == "return a + b\n"
    finally:
        while worktree.is_mount():
            subprocess.run(["umount", "-l", str(worktree)], check=False)


def test_an_edit_in_the_second_of_the_mount_comes_back_under_an_old_mke2fs_conf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """e2fsprogs before 1.46.4 (Debian 11, Ubuntu 20.04) give images under 512 MiB 128-byte
    inodes, whose timestamps are whole seconds: an edit made in the second of the mount got
    a ctime before the mark and was never copied back (5 lost of 5 here)."""
    conf = Path(os.environ.get("MKE2FS_CONFIG", "/etc/mke2fs.conf")).read_text()
    old = tmp_path / "mke2fs.conf"
    old.write_text(conf.replace("small = {", "small = {\n\t\tinode_size = 128", 1))
    monkeypatch.setenv("MKE2FS_CONFIG", str(old))
    for attempt in range(3):
        worktree, root = tmp_path / f"wt{attempt}", tmp_path / f"quota{attempt}"
        worktree.mkdir()
        (worktree / "calc.py").write_text("return a - b\n")
        quota = WorkspaceQuota.mount(worktree, 8 * 1024**2, root=root, layered=False)
        try:
            (worktree / "calc.py").write_text("return a + b\n")  # at once: the same second
            ctime = (worktree / "calc.py").stat().st_ctime_ns
            quota.release()
        finally:
            while worktree.is_mount():
                subprocess.run(["umount", "-l", str(worktree)], check=False)
        assert (worktree / "calc.py").read_text() == "return a + b\n", attempt
        assert ctime % 10**9 != 0, "whole-second timestamps on the image"


def _tree(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under root: (kind, permission bits, content or link target)."""
    seen: dict[str, tuple[str, int, bytes]] = {}
    for top, dirs, files, dirfd in os.fwalk(root, follow_symlinks=False):
        for name in (*dirs, *files):
            path = os.path.relpath(os.path.join(top, name), root)
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                seen[path] = ("link", 0, os.fsencode(os.readlink(name, dir_fd=dirfd)))
            elif stat.S_ISDIR(st.st_mode):
                seen[path] = ("dir", stat.S_IMODE(st.st_mode), b"")
            else:
                content = Path(os.path.join(top, name)).read_bytes()
                seen[path] = ("file", stat.S_IMODE(st.st_mode), content)
    return seen


def _settle(root: Path) -> None:
    """Wait until the newest change under root is more than the mark's margin old.

    What changed within ``_MARK_MARGIN_NS`` before the mount's mark is copied back (more,
    never less; mkfs even rounds the copied ctimes down to the second). Usually mkfs and the
    mount take longer than that, but not always on an idle host: then an untouched entry
    was copied too and a "nothing else" check failed for no fault of the copy-back.
    """
    newest = max(
        os.lstat(os.path.join(top, name)).st_ctime_ns
        for top, dirs, files in os.walk(root)
        for name in (".", *dirs, *files)
    )
    ready = newest + _MARK_MARGIN_NS + 20_000_000  # and a tick of the kernel's coarse clock
    while time.time_ns() < ready:  # the condition is the clock itself: at most ~70 ms
        time.sleep(0.005)


def test_every_kind_of_change_comes_back_and_nothing_else(tmp_path: Path) -> None:
    """The copy back lists only what changed (by inode and ctime): renames, swaps, deletions,
    type changes and same-size edits with a forged mtime all reach the worktree."""
    worktree, root = tmp_path / "wt", tmp_path / "quota"
    for d in ("x/deep", "y/deep", "gone/sub", "old", "keep/a/b"):
        (worktree / d).mkdir(parents=True)
    (worktree / "x/deep/f").write_text("from x\n")
    (worktree / "y/deep/f").write_text("from y\n")
    (worktree / "gone/sub/g").write_text("g\n")
    (worktree / "old/h").write_text("h\n")
    (worktree / "keep/a/b/same.py").write_text("return a - b\n")
    (worktree / "keep/untouched").write_text("u\n")
    (worktree / "was_link").symlink_to("/etc")
    (worktree / "was_dir").mkdir()
    (worktree / "was_dir/i").write_text("i\n")
    (worktree / "mode").write_text("m\n")
    (worktree / "keep/a/still").write_text("s\n")
    untouched = {p: (worktree / p).stat().st_mtime_ns for p in ("keep/a/still", "keep/a")}
    _settle(worktree)
    quota = WorkspaceQuota.mount(worktree, 8 * 1024**2, root=root, layered=False)
    try:
        (worktree / "x").rename(worktree / "tmp")  # swap two dirs: same paths, other inodes
        (worktree / "y").rename(worktree / "x")
        (worktree / "tmp").rename(worktree / "y")
        subprocess.run(["rm", "-r", str(worktree / "gone")], check=True)
        (worktree / "old").rename(worktree / "renamed")
        same = worktree / "keep/a/b/same.py"
        before = same.stat()
        same.write_text("return a + b\n")
        os.utime(same, ns=(before.st_atime_ns, before.st_mtime_ns))
        (worktree / "was_link").unlink()
        (worktree / "was_link").mkdir()
        (worktree / "was_link/passwd").write_text("not the host's\n")
        subprocess.run(["rm", "-r", str(worktree / "was_dir")], check=True)
        (worktree / "was_dir").write_text("now a file\n")
        (worktree / "mode").chmod(0o600)
        os.link(worktree / "keep/untouched", worktree / "hard")
        (worktree / "new\nline").write_text("n\n")
        Path(os.fsdecode(bytes(worktree) + b"/bad-\xff-utf8")).write_text("b\n")
        expected = _tree(worktree)
        quota.release()
        assert _tree(worktree) == expected
        assert Path("/etc/passwd").read_text() != "not the host's\n"
        # Not copied at all: rsync -a over the whole tree reset their mtimes to the image's
        # (whole seconds, as mkfs copies times).
        assert {p: (worktree / p).stat().st_mtime_ns for p in untouched} == untouched
    finally:
        while worktree.is_mount():
            subprocess.run(["umount", "-l", str(worktree)], check=False)


def test_type_changes_under_untouched_parents_come_back(tmp_path: Path) -> None:
    """Only the changed entries are listed when their parent keeps its names: a symlink
    become a directory is replaced (never followed), a directory become a file replaces it."""
    worktree, root, outside = tmp_path / "wt", tmp_path / "quota", tmp_path / "outside"
    (worktree / "a/d").mkdir(parents=True)
    (worktree / "a/d/x").write_text("x\n")
    outside.mkdir()
    (worktree / "a/l").symlink_to(outside)
    quota = WorkspaceQuota.mount(worktree, 8 * 1024**2, root=root, layered=False)
    try:
        (worktree / "a/l").unlink()
        (worktree / "a/l").mkdir()
        (worktree / "a/l/planted").write_text("p\n")
        subprocess.run(["rm", "-r", str(worktree / "a/d")], check=True)
        (worktree / "a/d").write_text("now a file\n")
        expected = _tree(worktree)
        quota.release()
        assert _tree(worktree) == expected
        assert list(outside.iterdir()) == []
    finally:
        while worktree.is_mount():
            subprocess.run(["umount", "-l", str(worktree)], check=False)


def test_a_run_that_changed_nothing_copies_nothing(tmp_path: Path) -> None:
    """Nothing listed, no rsync: the worktree (its top dir included) keeps its times."""
    worktree, root = tmp_path / "wt", tmp_path / "quota"
    (worktree / "d").mkdir(parents=True)
    (worktree / "d/f").write_text("f\n")
    times = {p: p.stat().st_mtime_ns for p in (worktree, worktree / "d", worktree / "d/f")}
    _settle(worktree)
    quota = WorkspaceQuota.mount(worktree, 8 * 1024**2, root=root)
    try:
        assert (worktree / "d/f").read_text() == "f\n"
        quota.release()
        assert {p: p.stat().st_mtime_ns for p in times} == times
    finally:
        while worktree.is_mount():
            subprocess.run(["umount", "-l", str(worktree)], check=False)


def _mount_points_of(image: Path) -> list[str]:
    """Where the loop device(s) backed by image are mounted (this mount namespace)."""
    devices = set()
    for block in Path("/sys/block").glob("loop*"):
        backing = block / "loop" / "backing_file"
        if backing.exists() and backing.read_text().strip() == str(image):
            devices.add((block / "dev").read_text().strip())
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[2] in devices]  # fmt: skip


def _moved_orphan(tmp_path: Path) -> tuple[Path, Path, Path]:
    """An orphaned quota whose worktree's parent was renamed while mounted (pytest renames a
    stale basetemp dir to garbage-* before deleting it; a user may move a project dir): the
    bind moved along. (worktree now, quota root, image)"""
    parent, root = tmp_path / "run", tmp_path / "quota"
    (parent / "wt").mkdir(parents=True)
    (parent / "wt" / "a.txt").write_text("a\n")
    _orphan(parent / "wt", root, lambda wt: (wt / "written-inside.txt").write_text("kept\n"))
    moved = tmp_path / "garbage-run" / "wt"
    parent.rename(moved.parent)
    assert moved.is_mount() and not (parent / "wt").exists()
    (image,) = root.glob("*/fs.img")
    return moved, root, image


def _unmount_all(*points: Path) -> None:
    for leftover in points:
        while leftover.is_mount():
            subprocess.run(["umount", "-l", str(leftover)], check=False)


def test_a_sweep_follows_a_worktree_moved_while_mounted_and_deletes_no_mounted_image(
    tmp_path: Path,
) -> None:
    """The sweep found nothing at the recorded path, unmounted the image's own mount point
    and deleted the image while it was still mounted at the moved worktree: the run's work
    was lost and the mount left over a deleted file. The bind is where the worktree is."""
    moved, root, image = _moved_orphan(tmp_path)
    try:
        assert sweep_stale(root) == 1
        assert not moved.is_mount()
        assert _mount_points_of(image) == []
        assert (moved / "written-inside.txt").read_text() == "kept\n"  # put back where it is
        assert (moved / "a.txt").read_text() == "a\n"
        assert _emptied(root)
    finally:
        _unmount_all(moved, *sorted(root.glob("*/merged")), *sorted(root.glob("*/mnt")))


def test_a_leftover_mount_in_use_keeps_its_image_until_a_later_sweep(tmp_path: Path) -> None:
    """A process still works in the moved worktree: its mount is not taken from under it and
    the image stays (mounted and recorded); the sweep after the process ended puts it back."""
    moved, root, image = _moved_orphan(tmp_path)
    user = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            cwd=moved, stdin=subprocess.PIPE)  # fmt: skip
    try:
        with structlog.testing.capture_logs() as logs:
            assert sweep_stale(root) == 0
        assert [e for e in logs if e["event"] == "sandbox.quota_sweep_failed"], logs
        assert moved.is_mount() and image.exists()
        assert _mount_points_of(image), "the image was unmounted from under the overlay"
        assert (moved / "written-inside.txt").read_text() == "kept\n"
        assert user.stdin is not None
        user.stdin.close()
        assert user.wait(60) == 0
        assert sweep_stale(root) == 1
        assert not moved.is_mount() and _mount_points_of(image) == []
        assert (moved / "written-inside.txt").read_text() == "kept\n"
        assert _emptied(root)
    finally:
        user.kill()
        user.wait()
        if user.stdin is not None:
            user.stdin.close()
        _unmount_all(moved, *sorted(root.glob("*/merged")), *sorted(root.glob("*/mnt")))
