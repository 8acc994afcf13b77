"""Red team on the quota's in-process copy-back (copyback.py), through real runs and races.

The run's changes here are all "plain" (regular files and new directories only), so the
host copies them itself instead of handing them to rsync: what rsync's ``--chmod=ug-s,o-w``
and ``-a`` guaranteed must hold for that path too. The swaps below are what a process still
writing in the image could do between the copy's plan and its copy of a file.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from synthorg.sandbox import copyback, quota
from synthorg.sandbox.bwrap import python_in_sandbox
from synthorg.sandbox.quota import ROOT_ENV, unavailable_reason
from synthorg.sandbox.upper import Applied, Bounds
from synthorg.service.demo import create_demo_repo

from .test_redteam_more import attack, booted, git


@pytest.mark.bwrap
@pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}")
async def test_plain_changes_copied_in_process_land_no_set_id_or_world_writable_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """set-id and world-writable files and dirs, a mode-only change of a tracked file (same
    content: only its attributes are copied), an edit keeping size and mtime, odd names:
    all applied from the overlay's upper (upper.py); none may land set-id or writable by any
    host user."""
    monkeypatch.setenv(ROOT_ENV, str(tmp_path / "quota"))
    taken: list[Applied] = []
    applied = quota.apply_upper

    def spy(upper: Path, worktree: Path, bounds: Bounds) -> Applied:
        taken.append(applied(upper, worktree, bounds))
        return taken[-1]

    monkeypatch.setattr(quota, "apply_upper", spy)
    repo = create_demo_repo(tmp_path / "calc")
    plan = [
        "cd /workspace && cp /bin/true suid && chmod 6777 suid"
        " && mkdir sg && chmod 2777 sg && printf x > sg/f && chmod 6666 sg/f"
        " && mkdir -p deep/a/b && chmod 1777 deep/a"
        " && printf y > deep/a/b/g && chmod 4777 deep/a/b/g"
        " && chmod 6777 README.md"
        ' && m=$(stat -c %y calc.py) && sed -i "1s/^./#/" calc.py && touch -d "$m" calc.py'
        " && printf nl > \"$(printf 'new\\nline')\" && printf odd > \"$(printf 'o\\001\\377dd')\""
        " && echo planted",
    ]
    async with booted(tmp_path / "home") as components:
        cid, out, result = await attack(components, repo, plan)
    assert "planted" in out[0], out
    assert len(taken) == 1 and taken[0].entries > 0, "no upper applied: upper.py not covered"
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    for path in [worktree, *worktree.rglob("*")]:
        st = path.lstat()
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), path
        assert not st.st_mode & stat.S_IWOTH, path
    assert (worktree / "sg" / "f").read_text() == "x"
    assert (worktree / "deep" / "a" / "b" / "g").read_text() == "y"
    sha = result.commit_sha  # type: ignore[attr-defined]
    assert sha is not None, result
    assert git(repo, "show", f"{sha}:calc.py").startswith("#")
    listing = subprocess.run(["git", "ls-tree", "-r", "-z", "--name-only", sha], cwd=repo,
                             capture_output=True, check=True).stdout  # fmt: skip
    names = set(map(os.fsdecode, listing.split(b"\0")))
    assert {"new\nline", os.fsdecode(b"o\x01\xffdd"), "suid", "sg/f"} <= names, names


def _secret(tmp_path: Path) -> Path:
    """A host dir the image's names could be pointed at (the image is mounted on the host,
    so an absolute symlink in it names a host path)."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "x.txt").write_text("host secret\n")
    return secret


def _image_and_worktree(tmp_path: Path) -> tuple[Path, Path]:
    image, worktree = tmp_path / "image", tmp_path / "worktree"
    (image / "sub").mkdir(parents=True)
    (image / "sub" / "x.txt").write_text("agent\n")
    (image / "other").write_bytes(os.urandom(8192))
    worktree.mkdir()
    (worktree / "sub").mkdir()
    (worktree / "sub" / "x.txt").write_text("before\n")
    return image, worktree


def _swap_dir_for_link(image: Path, secret: Path) -> None:
    (image / "sub" / "x.txt").unlink()
    (image / "sub").rmdir()
    (image / "sub").symlink_to(secret)


def _swap_file_for_link(image: Path, secret: Path) -> None:
    (image / "sub" / "x.txt").unlink()
    (image / "sub" / "x.txt").symlink_to(secret / "x.txt")


def _swap_file_for_fifo(image: Path, secret: Path) -> None:
    (image / "sub" / "x.txt").unlink()
    os.mkfifo(image / "sub" / "x.txt")


def _swap_file_for_hard_link(image: Path, secret: Path) -> None:
    (image / "sub" / "x.txt").unlink()
    os.link(image / "other", image / "sub" / "x.txt")


def _swap_file_for_sparse(image: Path, secret: Path) -> None:
    (image / "sub" / "x.txt").unlink()
    with open(image / "sub" / "x.txt", "wb") as f:
        f.truncate(64 << 20)


@pytest.mark.parametrize(
    "swap",
    [
        _swap_dir_for_link,
        _swap_file_for_link,
        _swap_file_for_fifo,
        _swap_file_for_hard_link,
        _swap_file_for_sparse,
    ],
)
def test_an_entry_swapped_after_the_plan_is_never_followed_nor_copied(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    swap: Callable[[Path, Path], None],
) -> None:
    """TOCTOU: the plan saw a plain file; before its copy the image's entry (or its parent)
    becomes a symlink to a host secret, a fifo (an open would block), a hard link (the
    quota's -H case) or a sparse file (the --sparse case). The copy must refuse (rsync then
    copies the list) and write nothing of the host's or of the swap into the worktree."""
    image, worktree = _image_and_worktree(tmp_path)
    secret = _secret(tmp_path)
    original = copyback._copy_file
    swapped: list[str] = []

    def racing(src: int, dst: int, rel: str) -> None:
        if rel == "sub/x.txt" and not swapped:
            swap(image, secret)
            swapped.append(rel)
        original(src, dst, rel)

    monkeypatch.setattr(copyback, "_copy_file", racing)
    assert not copyback.copy_back_plain(image, worktree, ["sub/.", "sub/x.txt"])
    assert swapped == ["sub/x.txt"]
    assert (worktree / "sub" / "x.txt").read_text() == "before\n"
    assert sorted(os.listdir(worktree / "sub")) == ["x.txt"]  # no temp file left behind
    assert (secret / "x.txt").read_text() == "host secret\n"


@pytest.mark.bwrap
@pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}")
async def test_holes_behind_a_shared_xattr_block_cost_the_host_no_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ext4 shares one block among identical extended attributes, yet counts it in every
    sharing file's st_blocks: a file of one block that is all hole then looks fully
    allocated (st_blocks * 512 >= st_size). Copied in-process as plain, each was written
    out as zeros: a block of host disk per file for one block of the image (rsync's
    --sparse, which the copy-back relied on before, leaves holes as holes)."""
    monkeypatch.setenv(ROOT_ENV, str(tmp_path / "quota"))
    repo = create_demo_repo(tmp_path / "calc")
    plant = (
        "import os\n"
        "bs = os.statvfs('.').f_bsize\n"
        "for i in range(300):\n"
        "    n = f'h{i}'\n"
        "    open(n, 'wb').truncate(bs)\n"
        "    os.setxattr(n, 'user.pad', b'x' * (bs // 2))\n"
        "st = os.stat('h0')\n"
        "print('looks-plain' if st.st_blocks * 512 >= st.st_size else 'sparse', bs)\n"
    )
    plan = [f'cd /workspace && {python_in_sandbox()} -c "{plant}" && echo planted']
    async with booted(tmp_path / "home") as components:
        cid, out, _ = await attack(components, repo, plan)
    assert "looks-plain" in out[0] and "planted" in out[0], out
    bs = int(out[0].split("looks-plain", 1)[1].split()[0])
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    files = [worktree / f"h{i}" for i in range(300)]
    assert all(f.stat().st_size == bs for f in files)  # every file came back, as it was
    assert (worktree / "h0").read_bytes() == bytes(bs)
    landed = sum(f.stat().st_blocks * 512 for f in files)
    assert landed == 0, f"{landed >> 10} KiB of written-out holes on the host disk"
