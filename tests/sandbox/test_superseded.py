"""A successor stops a superseded owner's sandbox without letting it run one more command.

The old sandbox runs ``sleep 60; echo late >> late.txt`` (the distributed suite's frozen
call). Killed one process at a time, deepest first, the shell woke when its ``sleep`` died
and wrote late.txt before its own SIGKILL came: under load the successor landed the zombie's
late write (tests/distributed/test_zombie_fence.py). Here each SIGKILL is followed by a pause
that gives any process left running the time to write, so the old order failed every time.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from synthorg.sandbox import superseded

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")

#: Long enough for a woken shell to append a line, on a busy machine.
_GRACE_S = 1.0


def _orphan_sandbox(worktree: Path, script: str) -> int:
    """A bwrap sandbox in worktree whose parent is not this process (as another owner's is):
    ``setsid -f`` forks it off, so the successor's rule of sparing its own tree does not."""
    subprocess.run(
        ["setsid", "-f", "bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent",
         "--", "sh", "-c", script],
        cwd=worktree, check=True,
    )  # fmt: skip
    for _ in range(10_000):  # until it and its sleep are up (the shell started its command)
        for proc in psutil.process_iter(["name", "cwd"]):
            ours = proc.info["name"] == "bwrap" and proc.info["cwd"] == str(worktree)
            if ours and any(c.name() == "sleep" for c in proc.children(recursive=True)):
                return proc.pid
    raise AssertionError("the sandbox did not start its sleep")


def test_no_process_of_a_stopped_sandbox_runs_after_the_first_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    late = worktree / "late.txt"
    outer = _orphan_sandbox(worktree, f"sleep 60; echo late >> {late}")
    real_kill = os.kill

    def kill_then_wait(pid: int, sig: int) -> None:
        real_kill(pid, sig)
        if sig == signal.SIGKILL:  # whatever is left running gets the time to write
            deadline = time.monotonic() + _GRACE_S
            while not late.exists() and time.monotonic() < deadline:
                time.sleep(0.01)  # polling for a write that must not come, bounded

    monkeypatch.setattr(superseded.os, "kill", kill_then_wait)
    try:
        assert superseded.stop_sandboxes(worktree) == 1
    finally:
        monkeypatch.undo()
        for proc in [p for p in psutil.process_iter(["cwd"]) if p.info["cwd"] == str(worktree)]:
            proc.kill()
    assert not psutil.pid_exists(outer) or psutil.Process(outer).status() == psutil.STATUS_ZOMBIE
    assert not late.exists(), late.read_text()
