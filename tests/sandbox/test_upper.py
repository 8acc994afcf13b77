"""Applying an overlay's upper layer onto the host worktree (upper.py), on hand-made uppers.

The kernel writes the upper on the sandbox's behalf; these uppers are what a hostile run,
a tampered image or a future kernel could leave: whiteouts and opaque dirs under a symlink
the agent planted in the host tree earlier, redirect and metacopy xattrs, devices, hard
links, more entries or bytes than the image could hold. (Root: whiteouts are devices and
overlay xattrs are ``trusted.*``.)
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from synthorg.sandbox.upper import Bounds, UpperRefused, apply_upper

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="whiteouts and trusted xattrs need root")

WIDE = Bounds(entries=10_000, data_bytes=64 << 20)


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(upper, worktree, a host dir outside the worktree holding a victim file)."""
    upper, worktree, outside = tmp_path / "upper", tmp_path / "wt", tmp_path / "outside"
    for d in (upper, worktree, outside):
        d.mkdir()
    (outside / "victim").write_text("host file\n")
    return upper, worktree, outside


def _whiteout(path: Path) -> None:
    os.mknod(path, stat.S_IFCHR, os.makedev(0, 0))


def _listing(root: Path) -> dict[str, str]:
    seen = {}
    for top, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(top, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                seen[rel] = f"-> {os.readlink(path)}"
            elif path.is_dir():
                seen[rel] = "dir"
            else:
                seen[rel] = path.read_text()
    return seen


def test_edits_additions_and_whiteouts_land(trees: tuple[Path, Path, Path]) -> None:
    upper, worktree, _ = trees
    (worktree / "d").mkdir()
    (worktree / "d" / "gone").write_text("g\n")
    (worktree / "d" / "kept").write_text("k\n")
    (worktree / "edited").write_text("old\n")
    (worktree / "tree").mkdir()
    (worktree / "tree" / "deep").write_text("x\n")
    (upper / "d").mkdir()
    _whiteout(upper / "d" / "gone")
    _whiteout(upper / "tree")  # a whole directory deleted
    _whiteout(upper / "never-there")
    (upper / "edited").write_text("new\n")
    (upper / "added").mkdir()
    (upper / "added" / "f").write_text("f\n")
    applied = apply_upper(upper, worktree, WIDE)
    assert applied.entries == 7  # whiteouts count, applied or not
    # The parent of an edit ("d", copied up) is not a change; a new directory is.
    assert applied.changed == {"d/gone", "tree", "never-there", "edited", "added", "added/f"}
    assert _listing(worktree) == {
        "d": "dir", "d/kept": "k\n", "edited": "new\n", "added": "dir", "added/f": "f\n"
    }  # fmt: skip


def test_an_opaque_dir_replaces_the_host_dir(trees: tuple[Path, Path, Path]) -> None:
    upper, worktree, _ = trees
    (worktree / "d" / "sub").mkdir(parents=True)
    (worktree / "d" / "old").write_text("o\n")
    (worktree / "d" / "sub" / "older").write_text("o\n")
    (upper / "d").mkdir()
    os.setxattr(upper / "d", "trusted.overlay.opaque", b"y")
    (upper / "d" / "new").write_text("n\n")
    assert apply_upper(upper, worktree, WIDE).changed == {"d", "d/new"}  # all of d
    assert _listing(worktree) == {"d": "dir", "d/new": "n\n"}


def test_a_user_overlay_xattr_is_no_opaque_mark(trees: tuple[Path, Path, Path]) -> None:
    """The agent can set ``user.*`` xattrs; the overlay (no ``userxattr``) ignores them, so
    does the apply: the host dir keeps its other entries."""
    upper, worktree, _ = trees
    (worktree / "d").mkdir()
    (worktree / "d" / "old").write_text("o\n")
    (upper / "d").mkdir()
    os.setxattr(upper / "d", "user.overlay.opaque", b"y")
    (upper / "d" / "new").write_text("n\n")
    apply_upper(upper, worktree, WIDE)
    assert _listing(worktree) == {"d": "dir", "d/old": "o\n", "d/new": "n\n"}


def test_whiteouts_and_files_under_a_planted_symlink_stay_in_the_worktree(
    trees: tuple[Path, Path, Path],
) -> None:
    """An earlier run left ``link -> <outside>`` in the host tree; this upper has a dir of that
    name with a whiteout of the victim and a new file: the symlink is replaced by a dir, the
    file outside is neither deleted nor written beside."""
    upper, worktree, outside = trees
    (worktree / "link").symlink_to(outside)
    (worktree / "opaque-link").symlink_to(outside)
    (upper / "link").mkdir()
    _whiteout(upper / "link" / "victim")
    (upper / "link" / "planted").write_text("p\n")
    (upper / "opaque-link").mkdir()
    os.setxattr(upper / "opaque-link", "trusted.overlay.opaque", b"y")
    apply_upper(upper, worktree, WIDE)
    assert _listing(outside) == {"victim": "host file\n"}
    assert _listing(worktree) == {"link": "dir", "link/planted": "p\n", "opaque-link": "dir"}


def test_a_symlink_replacing_a_directory_is_a_link_and_nothing_is_followed(
    trees: tuple[Path, Path, Path],
) -> None:
    upper, worktree, outside = trees
    (worktree / "src").mkdir()
    (worktree / "src" / "main.py").write_text("m\n")
    (upper / "src").symlink_to(outside)
    (upper / "victim").symlink_to(outside / "victim")
    apply_upper(upper, worktree, WIDE)
    assert _listing(worktree) == {"src": f"-> {outside}", "victim": f"-> {outside}/victim"}
    assert _listing(outside) == {"victim": "host file\n"}


@pytest.mark.parametrize("name", ["redirect", "metacopy", "whiteout", "nlink"])
def test_an_overlay_xattr_that_redirects_refuses_the_whole_upper(
    trees: tuple[Path, Path, Path], name: str
) -> None:
    """redirect (a renamed dir whose content is a lower dir elsewhere), metacopy (a file whose
    data is in the lower), xwhiteout: the upper entry is not what it holds. Nothing lands."""
    upper, worktree, _ = trees
    (worktree / "a").write_text("a\n")
    (upper / "a").write_text("changed\n")
    (upper / "moved").mkdir()
    os.setxattr(upper / "moved", f"trusted.overlay.{name}", b"/outside")
    with pytest.raises(UpperRefused, match=name):
        apply_upper(upper, worktree, WIDE)
    assert _listing(worktree) == {"a": "a\n"}


def test_devices_fifos_and_sockets_stay_behind(trees: tuple[Path, Path, Path]) -> None:
    upper, worktree, _ = trees
    (worktree / "pipe").write_text("the host's file\n")
    os.mkfifo(upper / "pipe")
    os.mkfifo(upper / "fifo")
    os.mknod(upper / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mknod(upper / "disk", stat.S_IFBLK | 0o666, os.makedev(7, 0))
    (upper / "kept").write_text("k\n")
    apply_upper(upper, worktree, WIDE)
    assert _listing(worktree) == {"pipe": "the host's file\n", "kept": "k\n"}


def test_hard_links_land_as_links_and_never_to_a_host_file(
    trees: tuple[Path, Path, Path],
) -> None:
    """A link made in the run to a lower file is two names of one copied-up inode: both land
    as one new host inode; the host's original inode is replaced, not written through."""
    upper, worktree, _ = trees
    (worktree / "calc.py").write_text("orig\n")
    host_inode = (worktree / "calc.py").stat().st_ino
    (upper / "calc.py").write_text("orig\n")
    (upper / "sub").mkdir()
    os.link(upper / "calc.py", upper / "sub" / "hl")
    apply_upper(upper, worktree, WIDE)
    landed = {(worktree / p).stat().st_ino for p in ("calc.py", "sub/hl")}
    assert len(landed) == 1 and host_inode not in landed
    assert (worktree / "sub" / "hl").read_text() == "orig\n"


def test_set_id_bits_and_world_write_are_stripped(trees: tuple[Path, Path, Path]) -> None:
    upper, worktree, _ = trees
    (upper / "suid").write_text("#!/bin/sh\n")
    os.chmod(upper / "suid", 0o6777)
    (upper / "dir").mkdir()
    os.chmod(upper / "dir", 0o2777)
    apply_upper(upper, worktree, WIDE)
    assert stat.S_IMODE((worktree / "suid").stat().st_mode) == 0o775
    assert stat.S_IMODE((worktree / "dir").stat().st_mode) == 0o775


def test_sparse_files_land_sparse(trees: tuple[Path, Path, Path]) -> None:
    upper, worktree, _ = trees
    with open(upper / "sparse", "wb") as fh:
        fh.truncate(1 << 30)
        fh.seek(1 << 29)
        fh.write(b"data")
    apply_upper(upper, worktree, Bounds(entries=10, data_bytes=1 << 20))
    st = (worktree / "sparse").stat()
    assert st.st_size == 1 << 30 and st.st_blocks * 512 <= 1 << 20
    with open(worktree / "sparse", "rb") as fh:
        fh.seek(1 << 29)
        assert fh.read(4) == b"data"


@pytest.mark.parametrize("over", ["entries", "bytes"])
def test_more_than_the_image_could_hold_is_refused_before_anything_lands(
    trees: tuple[Path, Path, Path], over: str
) -> None:
    upper, worktree, _ = trees
    (worktree / "a").write_text("a\n")
    (upper / "a").write_text("changed\n")
    for i in range(20):
        (upper / f"f{i}").write_bytes(b"x" * 8192)
    bounds = (
        Bounds(entries=10, data_bytes=1 << 20)
        if over == "entries"
        else Bounds(entries=100, data_bytes=64 << 10)
    )
    with pytest.raises(UpperRefused, match="more than"):
        apply_upper(upper, worktree, bounds)
    assert _listing(worktree) == {"a": "a\n"}


def test_applying_twice_gives_the_same_tree(trees: tuple[Path, Path, Path]) -> None:
    """A release killed half-way applies the same upper again at the next sweep."""
    upper, worktree, _ = trees
    (worktree / "d").mkdir()
    (worktree / "d" / "old").write_text("o\n")
    (worktree / "x").write_text("x\n")
    (upper / "d").mkdir()
    os.setxattr(upper / "d", "trusted.overlay.opaque", b"y")
    (upper / "d" / "new").write_text("n\n")
    _whiteout(upper / "x")
    apply_upper(upper, worktree, WIDE)
    first = _listing(worktree)
    apply_upper(upper, worktree, WIDE)
    assert _listing(worktree) == first == {"d": "dir", "d/new": "n\n"}
