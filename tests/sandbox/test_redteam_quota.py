"""Red team on the disk quota's changed-only copy-back (quota.py), through real runs.

The agent owns the ext4 image for the run; at release the host (root) copies what changed
back onto the real worktree with rsync. Each test plants, as terminal commands of an ordinary
run, what could make that copy write outside the worktree, land a setuid file, lose an edit,
or strand the image, and checks the host side afterwards.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from synthorg.sandbox.quota import unavailable_reason
from synthorg.service.boot import boot
from synthorg.service.demo import create_demo_repo
from synthorg.service.loops import default_provisioner, default_registry
from tests.support import scripted_settings

from .redteam_git_scripts import PLANS
from .redteam_support import create_planned
from .test_redteam_more import CURRENT, MODEL, OUTPUTS, SCRIPT, attack, booted, git

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]


def _released(root: Path, limit_s: float = 30.0) -> list[str]:
    """What is left of root's quotas once the background delete had its time (bounded):
    [] when every quota was released; else their names and mounts."""
    deadline = time.monotonic() + limit_s
    while True:
        # One dir per data dir (quota.owner_root), its quotas inside.
        owners = list(root.iterdir()) if root.exists() else []
        left = sorted(p.name for owner in owners for p in owner.iterdir())
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if str(root) in line]  # fmt: skip
    return left + mounts


async def test_a_tree_deeper_than_path_max_does_not_strand_the_quota(
    tmp_path: Path, quotas: Path
) -> None:
    """Paths past PATH_MAX (made with relative mkdir/cd) made the copy-back's walk and rsync
    fail: the image stayed mounted and on disk, retried (and failing) at every later boot,
    so each run could leave its whole allowance behind on the host disk."""
    repo = create_demo_repo(tmp_path / "calc")
    name = "d" * 200
    deep = f"for i in $(seq 30); do mkdir {name} && cd {name} || exit 1; done; echo deep > f"
    async with booted(tmp_path / "home") as components:
        _, out, result = await attack(
            components,
            repo,
            [f"cd /workspace && echo edit > edit.txt && ({deep}) && echo planted"],
        )
    assert "planted" in out[0], out
    assert _released(quotas) == []
    sha = result.commit_sha  # type: ignore[attr-defined]
    assert sha is not None, result
    assert git(repo, "show", f"{sha}:edit.txt") == "edit\n"


async def test_copy_back_writes_nothing_outside_and_loses_no_edit(
    tmp_path: Path, quotas: Path
) -> None:
    """Every odd entry the agent can make comes back as itself (or not at all), never through
    a symlink (the worktree holds symlinks to host places where the image has directories),
    never setuid, and every real edit (including ones that keep size, mtime or the inode
    number) lands in the commit."""
    repo = create_demo_repo(tmp_path / "calc")
    (repo / "pkg").mkdir()
    for name in ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt"):
        (repo / "pkg" / name).write_text(f"{name} v1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pkg")
    outside = tmp_path / "outside"
    outside.mkdir()
    home = tmp_path / "home"
    long = "L" * 255
    plan = [
        # Round 1: symlinks to host places where a directory was, committed to the worktree.
        f"cd /workspace && mv pkg pkg.real && ln -s {outside} pkg && ln -s / rootlink"
        f" && ln -s {home.resolve()} datalink && ln -s /root rootdir && echo r1",
        # Round 2: directories where those symlinks are, with files "under" them.
        "cd /workspace && rm pkg rootlink datalink rootdir && mv pkg.real pkg"
        " && mkdir rootlink datalink rootdir && echo x > rootlink/evil && echo x > datalink/evil"
        " && echo x > rootdir/evil && mkdir pkg/sub && echo y > pkg/sub/evil && echo r2",
        # Edits that keep size, mtime or the inode number; hard links; specials; setuid.
        "cd /workspace/pkg && m=$(stat -c %y a.txt) && printf 'a.txt v2\\n' > a.txt"
        ' && touch -d "$m" a.txt'
        " && rm b.txt && printf 'b.txt v2\\n' > b.txt && touch -d 2001-01-01 b.txt"
        " && printf 'c.txt v2\\n' > c.new && mv c.new c.txt"
        " && truncate -s 0 d.txt && printf 'd.txt v2\\n' >> d.txt && touch -d 1999-01-01 d.txt"
        " && ln e.txt e.link && printf 'e.txt v2\\n' > e.txt"
        " && cp /bin/true suid && chmod 6755 suid && mkdir sgid && chmod 2775 sgid"
        " && mkfifo fifo && (mknod dev c 1 3 2>/dev/null; true)"
        " && mkdir ww && chmod 1777 ww && : > ww/f && chmod 666 ww/f"
        f" && printf nl > \"$(printf 'new\\nline')\" && printf odd > \"$(printf 'o\\001\\377dd')\""
        f" && printf long > {long} && echo r3",
    ]
    async with booted(home) as components:
        # Round 1 ends the first run (max_turns), so its symlinks are copied back onto the
        # worktree; the resumed run's image starts from them. Each round is a run of its own.
        record, token = await create_planned(components, repo, "Red team", max_turns=1)
        cid = record.id
        PLANS[token] = plan
        CURRENT.append(token)
        first = await asyncio.wait_for(components.service.run(cid), timeout=240)
        assert first.termination_reason.value == "max_turns", first
        links = home / "worktrees" / cid
        assert {p.name for p in links.glob("*/*") if p.is_symlink()} >= {"pkg", "rootdir"}
        for _ in plan:  # one turn per run (max_turns): commands 2 and 3, then finish
            result = await asyncio.wait_for(components.service.run(cid), timeout=240)
        out = OUTPUTS[token]
    assert [o.splitlines()[:1] for o in out] == [["r1"], ["r2"], ["r3"]], out
    assert list(outside.iterdir()) == []
    assert not (Path("/root") / "evil").exists() and not Path("/evil").exists()
    worktree = home / "worktrees" / cid
    stray = [p for p in home.rglob("evil") if worktree not in p.parents]
    assert stray == [], stray
    assert _released(quotas) == []
    sha = result.commit_sha  # type: ignore[attr-defined]
    assert sha is not None, result
    for name in ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt"):
        assert git(repo, "show", f"{sha}:pkg/{name}") == f"{name} v2\n", name
    assert git(repo, "show", f"{sha}:pkg/e.link") == "e.txt v2\n"
    assert git(repo, "show", f"{sha}:pkg/sub/evil") == "y\n"
    for name in ("rootlink", "datalink", "rootdir"):
        assert git(repo, "show", f"{sha}:{name}/evil") == "x\n", name
    listing = subprocess.run(["git", "ls-tree", "-r", "-z", "--name-only", sha], cwd=repo,
                             capture_output=True, check=True).stdout  # fmt: skip
    names = set(map(os.fsdecode, listing.split(b"\0")))
    assert {"pkg/new\nline", os.fsdecode(b"pkg/o\x01\xffdd"), f"pkg/{long}"} <= names, names
    assert not {"pkg/fifo", "pkg/dev"} & names
    for path in worktree.rglob("*"):  # the run's own worktree, as copied back
        st = path.lstat()
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), path
        # nothing any host user may write (the worktree is host root's to run git in)
        assert stat.S_ISLNK(st.st_mode) or not st.st_mode & stat.S_IWOTH, path
        assert not stat.S_ISBLK(st.st_mode) and not stat.S_ISCHR(st.st_mode), path
    assert os.geteuid() == 0  # the host side that copied all this back ran as root


async def test_a_writer_left_running_neither_strands_the_quota_nor_writes_after_release(
    tmp_path: Path, quotas: Path
) -> None:
    """A detached process still writing when the run ends: the release must not fail on a
    busy mount, and nothing reaches the worktree after the gate committed it."""
    repo = create_demo_repo(tmp_path / "calc")
    writer = "while :; do echo late >> /workspace/late.txt; done"
    async with booted(tmp_path / "home") as components:
        cid, out, result = await attack(
            components,
            repo,
            [f"cd /workspace && (setsid nohup sh -c '{writer}' >/dev/null 2>&1 &)"
             " && while [ ! -s late.txt ]; do :; done && echo started"],
        )  # fmt: skip
    assert "started" in out[0], out
    assert _released(quotas) == []
    sha = result.commit_sha  # type: ignore[attr-defined]
    assert sha is not None, result
    late = next((tmp_path / "home" / "worktrees" / cid).iterdir()) / "late.txt"
    committed = git(repo, "show", f"{sha}:late.txt")
    assert late.read_text() == committed  # nothing wrote after the copy-back


async def test_the_neutral_views_are_read_only_and_share_nothing_writable(
    tmp_path: Path,
) -> None:
    """/opt/python is a farm of hard links to the host's interpreter files (same inodes):
    a write, chmod or new file there would change the host's interpreter."""
    repo = create_demo_repo(tmp_path / "calc")
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    host = Path(sys.base_prefix).resolve()
    victim = host / "lib" / ver / "this.py"
    before = victim.stat()
    inside = f"/opt/python/lib/{ver}/this.py"
    probes = {
        "control": "touch /tmp/ok",  # the probe itself works
        "append": f": >> {inside}",
        "chmod": f"chmod 777 {inside}",
        "touch": f"touch -d 2001-01-01 {inside}",
        "create": "touch /opt/python/planted",
        "mkdir": f"mkdir /opt/python/lib/{ver}/planted",
        "rename": f"mv {inside} /opt/python/lib/{ver}/that.py",
        "link out": f"ln {inside} /workspace/hl",
        "link tmp": f"ln {inside} /tmp/hl",
        "runtime": "touch /opt/runtime/planted",
        "view root": "ls -d /var/tmp/synthorg-views-* /var/tmp/synthorg-quota",
    }
    script = "; ".join(
        f"if {cmd} 2>/dev/null; then echo 'OPEN {name}'; fi" for name, cmd in probes.items()
    )
    async with booted(tmp_path / "home") as components:
        _, out, _ = await attack(components, repo, [f"{script}; stat -c ino=%i {inside}"])
    # Where hard links are allowed the file inside is the host's own inode: a write would land.
    assert "ino=" in out[0], out
    assert [line for line in out[0].splitlines() if "OPEN" in line] == ["OPEN control"], out[0]
    after = victim.stat()
    assert (after.st_mode, after.st_mtime_ns, after.st_ctime_ns, after.st_nlink) == (
        before.st_mode, before.st_mtime_ns, before.st_ctime_ns, before.st_nlink,
    )  # fmt: skip
    assert not (host / "planted").exists() and not (host / "lib" / ver / "planted").exists()


async def test_a_quota_filled_to_the_last_block_still_copies_every_edit_back(
    tmp_path: Path, quotas: Path
) -> None:
    """The image full (ENOSPC) when the run ends: the host writes nothing into it at release,
    so in-place edits made at the limit still come back and the image is released. (calc.py
    is edited once first: in the overlay an edit copies the file up, which takes room.)"""
    repo = create_demo_repo(tmp_path / "calc")
    settings = scripted_settings(
        tmp_path / "home", SCRIPT, model=MODEL, sandbox={"limits": {"disk_bytes": 16 << 20}}
    )
    fill = "dd if=/dev/zero of=fill bs=4k; i=0; while : > f$i; do i=$((i+1)); done"
    plan = [
        f"cd /workspace && echo >> calc.py && ({fill}) 2>/dev/null;"
        " head -c 8192 /dev/zero > big || echo FULL",
        "cd /workspace && printf 'return a * b\\n' | dd of=calc.py conv=notrunc 2>/dev/null"
        " && rm -f fill f* && echo done",
    ]
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        cid, out, _ = await attack(c, repo, plan)
    assert "FULL" in out[0] and "done" in out[1], out
    assert _released(quotas) == []
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    assert (worktree / "calc.py").read_text().startswith("return a * b\n")
    assert not (worktree / "fill").exists()


async def test_sparse_files_do_not_carry_the_run_past_its_quota_on_the_host(
    tmp_path: Path, quotas: Path
) -> None:
    """A sparse file costs the image no blocks, so the quota never stops it; copied back
    without --sparse it was written out in full: N files of RLIMIT_FSIZE each on the host
    disk (here 3 x 100 MiB landed under a 16 MiB allowance)."""
    repo = create_demo_repo(tmp_path / "calc")
    settings = scripted_settings(
        tmp_path / "home", SCRIPT, model=MODEL, sandbox={"limits": {"disk_bytes": 16 << 20}}
    )
    plan = ["cd /workspace && truncate -s 100M s1.bin s2.bin s3.bin && du -ck s*.bin | tail -1"]
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        cid, out, _ = await attack(c, repo, plan)
    assert "total" in out[0], out
    assert _released(quotas) == []
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    sizes = [(worktree / f"s{i}.bin").stat() for i in (1, 2, 3)]
    assert [st.st_size for st in sizes] == [100 << 20] * 3  # the files came back as they were
    landed = sum(st.st_blocks * 512 for st in sizes)
    assert landed <= 16 << 20, f"{landed >> 20} MiB on the host disk"


async def test_hard_links_do_not_carry_the_run_past_its_quota_on_the_host(
    tmp_path: Path, quotas: Path
) -> None:
    """A hard link costs the image a directory entry, not the file's blocks; copied back
    without -H each link was written out as a file of its own (8 MiB linked 40 times: 320
    MiB landed under a 16 MiB allowance)."""
    repo = create_demo_repo(tmp_path / "calc")
    settings = scripted_settings(
        tmp_path / "home", SCRIPT, model=MODEL, sandbox={"limits": {"disk_bytes": 16 << 20}}
    )
    plan = [
        "cd /workspace && head -c 8M /dev/urandom > big && mkdir links"
        " && for i in $(seq 40); do ln big links/$i || exit 1; done && echo linked"
    ]
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        cid, out, _ = await attack(c, repo, plan)
    assert "linked" in out[0], out
    assert _released(quotas) == []
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    big = (worktree / "big").read_bytes()
    inodes = {(worktree / "big").stat().st_ino}
    for i in range(1, 41):
        link = worktree / "links" / str(i)
        assert link.read_bytes() == big, i  # every link came back with the content
        inodes.add(link.stat().st_ino)
    assert len(inodes) == 1, f"{len(inodes)} copies of 8 MiB on the host disk"


async def test_fifos_and_sockets_stay_in_the_image(tmp_path: Path, quotas: Path) -> None:
    """A FIFO the agent made in the worktree came back to the host worktree as a FIFO: any
    host process that reads it (a scan by content, an editor, ``cat``) blocks there. Special
    files are not copied back; the regular files beside them are, and the run lands."""
    repo = create_demo_repo(tmp_path / "calc")
    bind = "import socket; socket.socket(socket.AF_UNIX).bind('sub/sock')"
    plan = [
        "cd /workspace && mkfifo pipe && mkdir sub && mkfifo sub/pipe && echo kept > sub/kept"
        f' && python3 -c "{bind}" && test -p pipe -a -p sub/pipe -a -S sub/sock && echo made'
    ]
    async with booted(tmp_path / "home") as components:
        cid, out, result = await attack(components, repo, plan)
    assert out and "made" in out[0], out  # two FIFOs and a socket were made
    assert _released(quotas) == []
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    landed = [p for p in ("pipe", "sub/pipe", "sub/sock") if os.path.lexists(worktree / p)]
    assert landed == [], f"special files copied back to the host: {landed}"
    assert (worktree / "sub" / "kept").read_text() == "kept\n"
    sha = result.commit_sha  # type: ignore[attr-defined]
    assert sha is not None, result
    assert git(repo, "show", f"{sha}:sub/kept") == "kept\n"
