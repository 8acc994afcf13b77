"""Host-side children that die with this process: one reaper kills them once it is gone.

A SIGKILLed host left its ``git add`` (129 s) and ``mkfs.ext4`` (~4 min) running. The
kernel's own tie, PR_SET_PDEATHSIG, is set in the child: through ``preexec_fn`` (a fork
instead of a vfork) or a ``setpriv --pdeathsig`` exec, each ~4-5 ms per child here, and host
git runs ~15 times per run. Instead one reaper per process, started with the first tied
child, reads a pipe whose write end only this process holds: ``+pid`` when a tied child
starts, ``-pid`` once it is reaped. End of file means this process is gone, however it died:
the reaper SIGKILLs every child still listed (its whole process group when it leads one)
and exits. A child is tied right after its spawn: a host killed in between leaves it untied.
A run's host-work cgroup is tied too (``+/path``): everything in it is killed, whatever
process group or session it made for itself, and the dir removed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from synthorg.hostwork import current

_SCRIPT = r"""
import os, signal, sys, time
live, groups = set(), set()
for line in sys.stdin.buffer:
    item = line[1:].rstrip(b"\n")
    if item.startswith(b"/"):
        (groups.add if line[:1] == b"+" else groups.discard)(item)
        continue
    (live.add if line[:1] == b"+" else live.discard)(int(item))
for pid in live:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
for group in groups:  # a cgroup: everything in it, whatever group or session it made
    for _ in range(200):
        try:
            pids = open(group + b"/cgroup.procs").read().split()
        except OSError:
            break
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        try:
            os.rmdir(group)
            break
        except OSError:
            time.sleep(0.01)
"""
_lock = threading.Lock()
_pipe: tuple[int, int] | None = None  # (owning pid, write end)


def _write_end() -> int:
    """The write end of this process's reaper pipe (the reaper started on first use)."""
    global _pipe
    with _lock:
        if _pipe is not None and _pipe[0] == os.getpid():
            return _pipe[1]
        read, write = os.pipe()  # both non-inheritable: no other child holds the write end
        try:  # posix_spawn, not Popen: no object left to warn that its child still runs
            os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", "-c", _SCRIPT],
                {},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, read, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                ],
                setsid=True,  # a terminal's Ctrl-C is for the host, not for it
            )
        finally:
            os.close(read)
        _pipe = (os.getpid(), write)
        return write


def _send(line: bytes) -> None:
    global _pipe
    for _ in range(2):  # a reaper killed by someone: start another, once
        try:
            os.write(_write_end(), line)  # shorter than PIPE_BUF: atomic between threads
            return
        except OSError:
            with _lock:
                _pipe = None


def start() -> None:
    """Start this process's reaper now, so that tying a child just spawned is one write
    (the window in which a host killed leaves it untied is that write)."""
    _write_end()


def tie(pid: int) -> None:
    """Kill child ``pid`` (its group when it leads one) when this process dies."""
    _send(b"+%d\n" % pid)


def untie(pid: int) -> None:
    """``pid`` was reaped: forget it (its number may be reused)."""
    _send(b"-%d\n" % pid)


def tie_cgroup(path: Path) -> None:
    """Kill everything in cgroup ``path`` and remove it when this process dies."""
    _send(b"+" + bytes(path) + b"\n")


def untie_cgroup(path: Path) -> None:
    """Cgroup ``path`` was removed: forget it."""
    _send(b"-" + bytes(path) + b"\n")


def run_tied(
    argv: Sequence[str],
    *,
    input: bytes | None = None,
    timeout: float | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``subprocess.run(argv, capture_output=True)`` in its own process group, tied to this
    process; on timeout the group is killed and TimeoutExpired raised. Inside a run
    (``hostwork.current``) the child is the run's: confined, given the CPU seconds left, and
    its timeout at most the run's wall budget per step."""
    work = current()
    if work is not None:
        work.before_spawn(f"`{os.path.basename(argv[0])}`")
        timeout = min(timeout or work.budget.wall_s, work.budget.wall_s)
    start()
    with work.spawning() if work is not None else contextlib.nullcontext():
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            process_group=0,  # what it forks (rsync's receiver) goes with it
        )
    tie(proc.pid)
    try:
        if work is not None:
            work.adopt(proc.pid)
        with proc:
            try:
                out, err = proc.communicate(input, timeout=timeout)
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise
    finally:
        untie(proc.pid)
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
