"""The worktree reaches the sandbox user through an idmapped overlay layer (idmap.py), not by
chowning the host's files, and what the run wrote lands as the host's.

Through real bwrap sandboxes with the worktree quota (as root: loop mounts, the dropped
sandbox user). Before idmaps every start chowned the whole host tree to the sandbox user:
these failed there, the host's files owned by uid 999 after the first run.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from synthorg.sandbox import BwrapSandbox, SandboxLimits
from synthorg.sandbox.identity import IdentityMode, grant_tree, host_owner
from synthorg.sandbox.quota import unavailable_reason

from .helpers import attack

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]

EDIT = """
import json, os
os.chdir("/workspace")
seen = {name: os.stat(name).st_uid for name in ("a.txt", "pkg", "pkg/b.txt")}
with open("a.txt", "a") as fh:
    fh.write("edited\\n")
open("pkg/new.txt", "w").write("new\\n")
os.remove("pkg/b.txt")
os.mkdir("made")
os.symlink("a.txt", "made/link")
print(json.dumps({"uid": os.getuid(), "seen": seen}))
"""


@pytest.fixture
def tree(workspace: Path, quotas: Path) -> Path:
    (workspace / "pkg").mkdir()
    (workspace / "a.txt").write_text("a\n")
    (workspace / "pkg" / "b.txt").write_text("b\n")
    for i in range(200):
        (workspace / "pkg" / f"f{i}").write_text(f"{i}\n")
    return workspace


def _owners(root: Path) -> set[tuple[int, int]]:
    """The owners of every entry under root (not root itself)."""
    found = set()
    for top, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            st = os.lstat(os.path.join(top, name))
            found.add((st.st_uid, st.st_gid))
    return found


def _limits() -> SandboxLimits:
    return SandboxLimits(wall_timeout_s=60, disk_bytes=16 << 20)


def _dropped(bwrap: BwrapSandbox) -> None:
    if bwrap.identity.mode is not IdentityMode.DROPPED:
        pytest.skip("the idmap serves a sandbox user other than the host's (run as root)")


async def test_the_sandbox_owns_the_worktree_and_the_host_keeps_its_files(
    bwrap: BwrapSandbox, tree: Path
) -> None:
    _dropped(bwrap)
    before = {p: p.lstat().st_ctime_ns for p in tree.rglob("*")}
    got = await attack(bwrap, tree, EDIT, limits=_limits())
    sandbox_uid = bwrap.identity.uid
    assert got["uid"] == sandbox_uid
    assert set(got["seen"].values()) == {sandbox_uid}, got  # its own, through the idmap
    assert _owners(tree) == {host_owner()}  # no host file was handed over, nor came back so
    assert (tree / "a.txt").read_text() == "a\nedited\n"
    assert (tree / "pkg" / "new.txt").read_text() == "new\n"
    assert not (tree / "pkg" / "b.txt").exists()
    assert os.readlink(tree / "made" / "link") == "a.txt"
    untouched = tree / "pkg" / "f7"
    assert untouched.lstat().st_ctime_ns == before[untouched]  # not even chowned to itself


async def test_a_tree_an_earlier_walk_handed_over_is_taken_back(
    bwrap: BwrapSandbox, tree: Path
) -> None:
    """A worktree of a run before idmaps (or one without a quota) belongs to the sandbox
    user; an idmapped start maps only the host's ids, so it takes the tree back first."""
    _dropped(bwrap)
    grant_tree(tree, bwrap.identity, keep_top=True)
    assert (bwrap.identity.uid, bwrap.identity.gid) in _owners(tree)
    got = await attack(bwrap, tree, EDIT, limits=_limits())
    assert set(got["seen"].values()) == {bwrap.identity.uid}, got
    assert _owners(tree) == {host_owner()}
    assert (tree / "a.txt").read_text() == "a\nedited\n"


async def test_an_entry_of_another_owner_is_read_as_a_stranger_would(
    bwrap: BwrapSandbox, tree: Path
) -> None:
    """Only the host owner's ids are mapped: a file of another user shows as the overflow id
    and is read by its 'other' bits, written by nobody in the sandbox."""
    _dropped(bwrap)
    stranger = tree / "pkg" / "f1"
    os.chown(stranger, 4242, 4242)
    stranger.chmod(0o644)
    code = (
        "import json, os\n"
        "st = os.stat('/workspace/pkg/f1')\n"
        "try:\n    open('/workspace/pkg/f1', 'a').write('x'); wrote = True\n"
        "except PermissionError:\n    wrote = False\n"
        "print(json.dumps({'uid': st.st_uid, 'read': open('/workspace/pkg/f1').read(),"
        " 'wrote': wrote}))"
    )
    got = await attack(bwrap, tree, code, limits=_limits())
    assert got == {"uid": 65534, "read": "1\n", "wrote": False}
    assert stranger.read_text() == "1\n"
    assert (stranger.stat().st_uid, stranger.stat().st_gid) == (4242, 4242)


async def test_two_sandboxes_of_one_process_share_the_idmapped_tree(
    bwrap: BwrapSandbox, tree: Path
) -> None:
    """The second sandbox on a worktree shares the first's quota: nothing is walked through
    the live overlay (there every file shows as the sandbox user's, and a walk taking the
    tree back would copy each one up), and both see the tree as the sandbox user's."""
    _dropped(bwrap)
    before = {p: p.lstat().st_ctime_ns for p in tree.rglob("*")}
    code = "import json, os\nprint(json.dumps({'seen': os.stat('/workspace/pkg/f3').st_uid}))"
    got = await asyncio.gather(*(attack(bwrap, tree, code, limits=_limits()) for _ in range(2)))
    assert [g["seen"] for g in got] == [bwrap.identity.uid] * 2
    assert _owners(tree) == {host_owner()}
    assert {p: p.lstat().st_ctime_ns for p in tree.rglob("*")} == before  # nothing landed
