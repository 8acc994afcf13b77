"""The checkout's own index after a run's first checkpoint (workspace/own_index.py).

A fresh worktree's index has racily clean entries: files written in the second the checkout
wrote the index, which git re-hashes at every write of it until one falls in a later second.
The run's first checkpoint hashes those files anyway (its whole scan of the layer under the
overlay); when that scan found exactly HEAD, the own index's entries all name their files'
content, so the checkpoint moves the index's mtime on and the landing's write re-hashes
nothing. The other side of the rule: a file that differs from HEAD, even one given its
recorded size and mtime back (what racy-git exists to catch), means no vouching, and git
still sees the change.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from synthorg import overlaylog
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.models import Workspace
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, make_repo

SMALL, BIG = 40, 2100  # a big tree's own index is split (index_file.BIG_TREE_ENTRIES)


def _files(n: int) -> dict[str, bytes]:
    return {f"d{i // 10}/f{i}.txt": f"file {i}\n".encode() for i in range(n)}


def _own_index(ws: Workspace) -> Path:
    assert ws.git_dir is not None
    return ws.git_dir / "index"


def _racy(ws: Workspace) -> list[str]:
    """The own index's entries git takes as racily clean (mtime second >= the index's)."""
    index_s = int(_own_index(ws).stat().st_mtime)
    listing = git(ws.path, "ls-files", "--debug")
    racy, path = [], ""
    for line in listing.splitlines():
        if not line.startswith(" "):
            path = line
        elif (found := re.match(r"\s+mtime: (\d+):", line)) and int(found.group(1)) >= index_s:
            racy.append(path)
    return racy


async def _fresh_worktree(tmp_path: Path, home: Path, n: int = SMALL) -> Workspace:
    repo = tmp_path / "proj"
    make_repo(repo, _files(n))
    ws = await WorktreeManager(home).create(repo, "conv-own")
    assert ws.git_dir is not None
    assert any(ws.git_dir.glob("sharedindex.*")) == (n >= BIG)
    # The checkout writes its index in the second of its last files (on a loaded machine
    # maybe the next one): made so here, the state git then treats as racy.
    newest = max((ws.path / rel).stat().st_mtime_ns for rel in _files(n))
    os.utime(_own_index(ws), ns=(newest, newest))
    assert _racy(ws)
    written = int(_own_index(ws).stat().st_mtime)
    while int(time.time()) <= written:  # the clock must pass that second for any cure
        time.sleep(0.01)
    return ws


async def _first_checkpoint(ws: Workspace, upper: Path) -> None:
    """What a run's first checkpoint does under an overlay that has changed nothing yet."""
    upper.mkdir()
    overlaylog.mounted(ws.path, "token-own", upper=upper, lower=ws.path)
    await CheckpointStore().create(ws)


@pytest.mark.parametrize("n", [SMALL, BIG])
async def test_a_scan_that_found_head_vouches_for_the_racy_entries(
    tmp_path: Path, home: Path, n: int
) -> None:
    ws = await _fresh_worktree(tmp_path, home, n)
    before = _own_index(ws).read_bytes()
    await _first_checkpoint(ws, tmp_path / "upper")
    assert _racy(ws) == []
    assert _own_index(ws).read_bytes() == before  # its content untouched: only the mtime
    assert git(ws.path, "status", "--porcelain") == ""


@pytest.mark.parametrize("n", [SMALL, BIG])
async def test_a_change_given_its_old_stat_back_is_never_vouched_for(
    tmp_path: Path, home: Path, n: int
) -> None:
    ws = await _fresh_worktree(tmp_path, home, n)
    rel = _racy(ws)[-1]  # one git would re-hash: its stat data alone do not clear it
    target = ws.path / rel
    old = target.stat()
    target.write_bytes(target.read_bytes().upper())  # same size, other content
    os.utime(target, ns=(old.st_atime_ns, old.st_mtime_ns))  # and its recorded mtime
    await _first_checkpoint(ws, tmp_path / "upper")
    assert rel in _racy(ws)  # still racy: git will look at its content
    assert git(ws.path, "status", "--porcelain").split() == ["M", rel]


async def test_an_untracked_file_is_no_reason_to_vouch(tmp_path: Path, home: Path) -> None:
    ws = await _fresh_worktree(tmp_path, home)
    (ws.path / "new.txt").write_text("new\n")
    await _first_checkpoint(ws, tmp_path / "upper")
    assert _racy(ws)  # the scan's tree was not HEAD's: the index is left as it was
