"""Red team on the overlay worktree (quota.py layered, upper.py), through real runs.

The run's worktree is an overlay whose upper layer is all the host applies back. Each plan
makes, from inside the sandbox, what overlayfs encodes specially in the upper (whiteouts,
opaque dirs, copied-up hard links, a symlink over a directory, a directory rename, devices,
FIFOs, overlay xattrs) and checks what reached the host worktree and what stayed outside.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from synthorg.sandbox.quota import unavailable_reason
from synthorg.service.boot import boot
from synthorg.service.demo import create_demo_repo
from synthorg.service.loops import default_provisioner, default_registry
from tests.support import scripted_settings

from .test_redteam_more import MODEL, SCRIPT, attack
from .test_redteam_quota import _released

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]


def _commit(repo: Path, outside: Path) -> None:
    """The repository as an earlier run could have left it: a symlink out of the tree, dirs."""
    for rel, text in {"pkg/a.py": "a\n", "pkg/b.py": "b\n", "tree/x": "x\n",
                      "keep/old": "old\n", "olddir/f": "f\n"}.items():  # fmt: skip
        (repo / rel).parent.mkdir(exist_ok=True)
        (repo / rel).write_text(text)
    (repo / "link").symlink_to(outside)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "tree"], check=True)


SETX = "import os, sys; os.setxattr(sys.argv[1], sys.argv[2], b'y')"
MKNOD = "import os, sys; os.mknod(sys.argv[1], 0o20600, os.makedev(int(sys.argv[2]), 0))"


async def test_overlay_encodings_land_as_plain_changes_inside_the_worktree_only(
    tmp_path: Path, quotas: Path
) -> None:
    repo, outside = create_demo_repo(tmp_path / "calc"), tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("host file\n")
    _commit(repo, outside)
    settings = scripted_settings(
        tmp_path / "home", SCRIPT, model=MODEL, sandbox={"limits": {"disk_bytes": 16 << 20}}
    )
    plan = [
        # an opaque dir: the lower pkg/ replaced by a new one
        "cd /workspace && rm -rf pkg && mkdir pkg && echo new > pkg/new.py && echo opaque",
        # a symlink replacing a directory
        "cd /workspace && rm -rf tree && ln -s /etc tree && echo symlinked",
        # a hard link in the upper to a lower file (copied up, then linked)
        "cd /workspace && ln calc.py hardlink.py && echo hardlinked",
        # a FIFO, a whiteout and a device made by hand
        f'cd /workspace && mkfifo fifo && echo fifo; python3 -c "{MKNOD}" wo 0 && echo WO;'
        f' python3 -c "{MKNOD}" dev 1 && echo DEV; true',
        # overlay xattrs: trusted.* refused by the kernel, user.* meaningless to this overlay
        f'cd /workspace && (python3 -c "{SETX}" keep trusted.overlay.redirect && echo TRUSTED;'
        f' python3 -c "{SETX}" keep trusted.overlay.opaque && echo TRUSTED;'
        f' python3 -c "{SETX}" keep user.overlay.opaque && echo user-set) 2>&1',
        # the planted symlink out of the tree: deleted and replaced by a dir with a victim
        "cd /workspace && rm link && mkdir link && echo inside > link/victim && echo replaced",
        # a directory rename: EXDEV (redirect_dir=nofollow), mv copies and deletes
        "cd /workspace && (python3 -c \"import os; os.rename('olddir', 'x')\" 2>&1 | tail -1);"
        " mv olddir newdir && echo moved",
    ]
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        cid, out, _ = await attack(c, repo, plan)
    assert len(out) == len(plan), out
    assert "opaque" in out[0] and "symlinked" in out[1] and "hardlinked" in out[2], out
    assert "fifo" in out[3] and "WO" not in out[3] and "DEV" not in out[3], out
    assert "TRUSTED" not in out[4] and "user-set" in out[4], out
    assert "replaced" in out[5] and "Invalid cross-device link" in out[6], out
    assert "moved" in out[6], out
    assert _released(quotas) == []
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    assert sorted(p.name for p in (worktree / "pkg").iterdir()) == ["new.py"]
    assert os.readlink(worktree / "tree") == "/etc"
    assert (worktree / "hardlink.py").read_text() == (repo / "calc.py").read_text()
    assert (worktree / "hardlink.py").stat().st_ino == (worktree / "calc.py").stat().st_ino
    for special in ("fifo", "wo", "dev"):
        assert not os.path.lexists(worktree / special), special
    assert (worktree / "keep" / "old").read_text() == "old\n"  # user.overlay.opaque: no mark
    assert (worktree / "link").is_dir() and not (worktree / "link").is_symlink()
    assert (worktree / "link" / "victim").read_text() == "inside\n"
    assert (outside / "victim").read_text() == "host file\n"
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert not (worktree / "olddir").exists()
    assert (worktree / "newdir" / "f").read_text() == "f\n"


async def test_the_upper_holds_no_more_files_than_the_quota_and_all_of_them_land(
    tmp_path: Path, quotas: Path
) -> None:
    """The upper's image bounds inodes as well as blocks: creating files stops at ENOSPC, and
    what was made before it lands (within the bounds the apply checks)."""
    repo = create_demo_repo(tmp_path / "calc")
    settings = scripted_settings(
        tmp_path / "home", SCRIPT, model=MODEL, sandbox={"limits": {"disk_bytes": 16 << 20}}
    )
    fill = (
        'import os\\nos.mkdir("many")\\ni = 0\\ntry:\\n'
        '    while i < 100000:\\n        open(f"many/{i}", "x").close(); i += 1\\n'
        'except OSError as e:\\n    print("stopped", i, e.errno)'
    )
    plan = [f"cd /workspace && printf '{fill}' | python3"]
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        cid, out, _ = await attack(c, repo, plan)
    assert out and "stopped" in out[0], out
    made, errno = map(int, out[0].split()[1:3])
    assert errno == 28 and 0 < made < 4096, out  # ENOSPC: 20 MiB at 8 KiB an inode
    assert _released(quotas) == []
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    assert len(list((worktree / "many").iterdir())) == made
