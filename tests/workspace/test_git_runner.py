"""The git runner and the repository lock: errors carry their cause, locks exclude."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from synthorg.errors import BoundaryError
from synthorg.workspace.git import GitError, run_git, run_git_retrying, run_git_sync
from synthorg.workspace.locks import exclusive

from .gitfixtures import make_repo


async def test_git_error_carries_command_exit_code_and_stderr(tmp_path: Path) -> None:
    with pytest.raises(GitError) as caught:
        await run_git(["rev-parse", "--verify", "nope"], tmp_path)
    err = caught.value
    assert isinstance(err, BoundaryError)
    assert err.args_list == ["rev-parse", "--verify", "nope"]
    assert err.returncode == 128
    assert "not a git repository" in err.stderr
    assert str(tmp_path) in str(err)
    assert not err.is_lock_race
    out = await run_git(["rev-parse", "--verify", "nope"], tmp_path, check=False)
    assert out.returncode == 128


def test_sync_runner_matches(tmp_path: Path) -> None:
    with pytest.raises(GitError):
        run_git_sync(["status"], tmp_path)
    assert run_git_sync(["--version"], tmp_path).text.startswith("git version")


async def test_inherited_git_dir_does_not_redirect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_repo(tmp_path / "a", {"f": b"a"})
    make_repo(tmp_path / "b", {"g": b"b"})
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "b" / ".git"))
    out = await run_git(["ls-files"], tmp_path / "a")
    assert out.text.split() == ["f"]


async def test_lock_races_are_retried(tmp_path: Path) -> None:
    make_repo(tmp_path, {"f": b"a"})
    lock = tmp_path / ".git" / "index.lock"
    lock.write_text("")
    with pytest.raises(GitError) as caught:
        await run_git(["add", "-A"], tmp_path)
    assert caught.value.is_lock_race

    async def release() -> None:
        await asyncio.sleep(0.1)
        lock.unlink()

    (tmp_path / "g").write_text("new")
    releaser = asyncio.create_task(release())
    await run_git_retrying(["add", "-A"], tmp_path)
    await releaser
    assert (await run_git(["ls-files"], tmp_path)).text.split() == ["f", "g"]


async def test_exclusive_serialises_tasks_and_survives_cancellation(tmp_path: Path) -> None:
    lock_file = tmp_path / "x.lock"
    inside = 0
    peak = 0

    async def worker() -> None:
        nonlocal inside, peak
        async with exclusive(lock_file):
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.01)
            inside -= 1

    await asyncio.gather(*(worker() for _ in range(10)))
    assert peak == 1

    async with exclusive(lock_file):
        waiter = asyncio.create_task(worker())
        await asyncio.sleep(0.02)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    async with asyncio.timeout(1):  # the cancelled waiter did not keep the lock
        async with exclusive(lock_file):
            pass


async def test_exclusive_excludes_other_processes(tmp_path: Path) -> None:
    lock_file, released = tmp_path / "x.lock", tmp_path / "released"
    # The other process holds the lock until told and marks its release before unlocking:
    # whoever gets the lock after it finds the mark.
    holder = (
        "import fcntl, os, sys, pathlib\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.readline()\n"
        "pathlib.Path(sys.argv[2]).touch()\n"
        "fcntl.flock(fd, fcntl.LOCK_UN)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder, str(lock_file), str(released)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        found: list[bool] = []

        async def take() -> None:
            async with exclusive(lock_file):
                found.append(released.exists())

        taker = asyncio.create_task(take())
        # Time to misbehave: a lock that let us in while held would be in by now. Not a wait
        # for anything: a pass on a slow machine is as correct as on a fast one.
        await asyncio.sleep(0.2)
        assert not taker.done()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        async with asyncio.timeout(30):
            await taker
        assert found == [True]
    finally:
        proc.kill()
        proc.wait(timeout=5)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
