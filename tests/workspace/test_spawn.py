"""run_collect: output and exit of a child, large pipes both ways, and cancellation."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from synthorg.workspace.spawn import run_collect

_ENV = {"PATH": os.environ["PATH"]}


async def test_collects_exit_code_stdout_and_stderr(tmp_path: Path) -> None:
    code = "import os, sys; print(os.getcwd()); print('err', file=sys.stderr); sys.exit(3)"
    rc, out, err = await run_collect(
        [sys.executable, "-c", code], cwd=tmp_path, env=_ENV, stdin=None
    )
    assert (rc, out, err) == (3, f"{tmp_path}\n".encode(), b"err\n")


async def test_more_than_a_pipe_buffer_each_way(tmp_path: Path) -> None:
    """A child that writes while it reads: neither side may block the other."""
    payload = os.urandom(3 * 1024 * 1024)
    code = (
        "import sys\n"
        "data = sys.stdin.buffer.read()\n"
        "sys.stderr.buffer.write(data[:70000]); sys.stdout.buffer.write(data[::-1])\n"
    )
    rc, out, err = await run_collect(
        [sys.executable, "-c", code], cwd=tmp_path, env=_ENV, stdin=payload
    )
    assert rc == 0 and out == payload[::-1] and err == payload[:70000]


async def test_cancelling_terminates_and_reaps_the_child(tmp_path: Path) -> None:
    marker = tmp_path / "terminated"
    pid_file = tmp_path / "pid"
    code = (
        "import os, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (open({str(marker)!r}, 'w').close(),"
        " sys.exit(0)))\n"
        f"open({str(pid_file)!r} + '.tmp', 'w').write(str(os.getpid()))\n"
        f"os.rename({str(pid_file)!r} + '.tmp', {str(pid_file)!r})\n"  # whole, once handled
        "time.sleep(600)\n"
    )
    task = asyncio.create_task(
        run_collect([sys.executable, "-c", code], cwd=tmp_path, env=_ENV, stdin=None)
    )
    while not pid_file.exists():  # the child's handler is in place
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert marker.exists()  # SIGTERM, not SIGKILL: git removes its lock files on it
    with pytest.raises(ChildProcessError):
        os.waitpid(int(pid_file.read_text()), os.WNOHANG)  # reaped already


async def test_a_missing_program_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        await run_collect([str(tmp_path / "nope")], cwd=tmp_path, env=_ENV, stdin=None)


def test_a_child_dies_with_its_sigkilled_host(tmp_path: Path) -> None:
    """Host git runs through run_collect: a SIGKILLed host's `git add` of a huge tree kept
    running for minutes. Here the child is stopped first, so only a kill can end it."""
    host_code = (
        "import asyncio, os, sys\n"
        "from pathlib import Path\n"
        "from synthorg.workspace.spawn import run_collect\n"
        "env = {'PATH': os.environ['PATH']}\n"
        "asyncio.run(run_collect(['sleep', '600'], cwd=Path('.'), env=env, stdin=None))\n"
    )
    host = subprocess.Popen([sys.executable, "-c", host_code], cwd=tmp_path)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while not (
            children := [p for p in psutil.Process(host.pid).children() if p.name() == "sleep"]
        ):
            assert time.monotonic() < deadline and host.poll() is None, "the child never ran"
            time.sleep(0.005)  # polling /proc: there is nothing to wait on
        # Tied right after its spawn: wait until the host's loop waits (epoll), which it does
        # only once the tie is written.
        while not any(
            (task / "wchan").read_text() == "do_epoll_wait"
            for task in Path(f"/proc/{host.pid}/task").iterdir()
        ):
            assert time.monotonic() < deadline and host.poll() is None, "the host never waited"
            time.sleep(0.005)  # polling /proc: there is nothing to wait on
        for child in children:
            child.suspend()
        os.kill(host.pid, signal.SIGKILL)
        host.wait()
        _, alive = psutil.wait_procs(children, timeout=30)
        assert alive == [], f"outlived its SIGKILLed host: {alive}"
    finally:
        host.kill()
        host.wait()
        for child in children:
            if child.is_running():
                child.kill()
