"""The sandbox pool: a pooled sandbox is the non-pooled one (mounts, cmdline, uid, seccomp,
quota) and serves one run only."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from synthorg.sandbox import BwrapSandbox, SandboxLimits
from synthorg.sandbox.pool import SandboxPool

from .helpers import py, request

pytestmark = [pytest.mark.bwrap, pytest.mark.timeout(300)]

#: Waits for its run spec before it looks at anything, as the OpenHands entrypoint does.
PROBE = r"""
import json, os, sys
spec = json.loads(sys.stdin.readline())
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
KEYS = ("Uid", "Gid", "CapEff", "CapBnd", "Seccomp", "NoNewPrivs")
vfs = os.statvfs("/workspace")
print(json.dumps({
    "spec": spec,
    "mountinfo": open("/proc/self/mountinfo").read(),
    "cmdline1": open("/proc/1/cmdline").read(),
    "cmdline": open("/proc/self/cmdline").read(),
    "status": {k: status[k].strip() for k in KEYS},
    "workspace": sorted(os.listdir("/workspace")),
    "readme": open("/workspace/README.md").read(),
    "dotgit": open("/workspace/.git").read(),
    "old_state": open("/state/old.json").read(),
    "disk_bytes": vfs.f_bavail * vfs.f_frsize,
}))
open("/workspace/written.txt", "w").write(spec["run"])
open("/state/new.json", "w").write(spec["run"])
"""
_TOKEN = re.compile(r"[0-9a-f]{16,}")


def _worktree(tmp_path: Path, name: str) -> Path:
    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    if not repo.exists():
        repo.mkdir()
        (repo / "README.md").write_text("hello\n")
        subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", "init"], check=True)
    worktree = tmp_path / "data" / "worktrees" / name
    subprocess.run([*git, "worktree", "add", "-q", "-b", name, str(worktree)], check=True)
    return worktree


def _state(tmp_path: Path, name: str) -> Path:
    state = tmp_path / "data" / "openhands" / name
    state.mkdir(parents=True)
    (state / "old.json").write_text(f"state of {name}")
    return state


def _normal(mountinfo: str) -> list[str]:
    """Each mount without what differs between any two sandboxes: ids, device numbers, loop
    device, the random names of the moved state dir and of bwrap's copy of the .git file."""
    rows = []
    for line in mountinfo.splitlines():
        fields = line.split()
        rest = fields[3:]
        row = re.sub(r"/dev/loop\d+", "/dev/loopN", " ".join(rest))
        # The one difference: a cold run's worktree is an overlay on its quota image, a slot's
        # a full copy in it (the slot's lower layer would be its empty dir: quota.adopt).
        row = re.sub(r"^(/ /workspace rw,nosuid,nodev,noatime) - .*", r"\1 - <quota>", row)
        rows.append(_TOKEN.sub("<token>", re.sub(r"/bindfile\w+/", "/bindfileX/", row)))
    return rows


def _fd(cmdline: str) -> str:
    return re.sub(r"--args\x00\d+\x00", "--args\x00N\x00", cmdline)


async def _run(runner: Any, worktree: Path, state: Path, name: str) -> dict[str, Any]:
    req = request(
        worktree,
        py(PROBE),
        state_dir=state,
        conversation_id=name,
        limits=SandboxLimits(wall_timeout_s=120, disk_bytes=64 * 1024**2),
    )
    lines: list[str] = []
    async with runner.stream(req, json.dumps({"run": name})) as proc:
        async for line in proc:
            lines.append(line)
    assert proc.exit is not None and proc.exit.returncode == 0, (lines, proc.exit)
    return dict(json.loads(lines[-1]), pid=proc.pid)


async def test_a_pooled_sandbox_is_the_non_pooled_one_and_serves_one_run(
    bwrap: BwrapSandbox, tmp_path: Path
) -> None:
    cold = await _run(bwrap, _worktree(tmp_path, "cold"), _state(tmp_path, "cold"), "cold")
    pool = SandboxPool(bwrap, size=1)
    try:
        template = request(
            _worktree(tmp_path, "template"),
            py(PROBE),
            state_dir=_state(tmp_path, "template"),
            limits=SandboxLimits(wall_timeout_s=120, disk_bytes=64 * 1024**2),
        )
        pool.warm(template)
        runs = {}
        for name in ("first", "second"):
            await pool.settle()
            worktree, state = _worktree(tmp_path, name), _state(tmp_path, name)
            runs[name] = await _run(pool, worktree, state, name)
            # The run's writes land on the host's worktree and state dir, as after a cold one.
            assert (worktree / "written.txt").read_text() == name
            assert (state / "new.json").read_text() == name
            assert (state / "old.json").read_text() == f"state of {name}"
        assert pool.served == 2
    finally:
        await pool.close()
    first, second = runs["first"], runs["second"]
    assert first["pid"] != second["pid"]  # each run its own sandbox: a used one is discarded
    for seen, name in ((first, "first"), (second, "second")):
        assert seen["spec"] == {"run": name}
        assert seen["old_state"] == f"state of {name}"  # its own state, nobody else's
        assert seen["readme"] == "hello\n" and seen["dotgit"] == cold["dotgit"]
        assert seen["workspace"] == cold["workspace"]  # its own worktree and nothing more
        assert _normal(seen["mountinfo"]) == _normal(cold["mountinfo"]), seen["mountinfo"]
        # bwrap's pid-1 names its options' memfd by number: whichever fd the host had free.
        assert _fd(seen["cmdline1"]) == _fd(cold["cmdline1"])
        for key in ("cmdline", "status"):
            assert seen[key] == cold[key], key
        # The same quota: the room left in the worktree is a cold start's.
        assert abs(seen["disk_bytes"] - cold["disk_bytes"]) <= cold["disk_bytes"] // 50
    assert "/workspace" in cold["mountinfo"] and "overlay" in cold["mountinfo"]


async def test_a_run_waits_for_a_slot_still_starting_rather_than_start_another(
    bwrap: BwrapSandbox, tmp_path: Path
) -> None:
    pool = SandboxPool(bwrap, size=1, refill=False)  # as `synthorg run` keeps it
    try:
        worktree, state = _worktree(tmp_path, "only"), _state(tmp_path, "only")
        req = request(
            worktree,
            py(PROBE),
            state_dir=state,
            limits=SandboxLimits(wall_timeout_s=120, disk_bytes=64 * 1024**2),
        )
        pool.warm(req)  # its start has not even begun when the run comes
        seen = await _run(pool, worktree, state, "only")
        assert pool.served == 1 and seen["spec"] == {"run": "only"}
        assert not any(pool._idle.values())  # nothing replaced it
    finally:
        await pool.close()


async def test_a_worktree_too_large_for_the_slot_starts_cold(
    bwrap: BwrapSandbox, tmp_path: Path
) -> None:
    pool = SandboxPool(bwrap, size=1)
    try:
        worktree, state = _worktree(tmp_path, "large"), _state(tmp_path, "large")
        (worktree / "big.bin").write_bytes(b"x" * 6 * 1024**2)  # past the slot's image
        limits = SandboxLimits(wall_timeout_s=120, disk_bytes=1024**2)
        req = request(worktree, py(PROBE), state_dir=state, limits=limits, conversation_id="l")
        pool.warm(req)
        await pool.settle()
        (slot,) = [s for slots in pool._idle.values() for s in slots]
        lines: list[str] = []
        async with pool.stream(req, json.dumps({"run": "large"})) as proc:
            lines += [line async for line in proc]
        assert proc.exit is not None and proc.exit.returncode == 0, (lines, proc.exit)
        assert pool.served == 0 and proc.pid != slot.process.pid  # a cold sandbox served it
        assert slot.process.exit is not None  # the slot was never handed out, and is gone
        assert (worktree / "written.txt").read_text() == "large"
    finally:
        await pool.close()
