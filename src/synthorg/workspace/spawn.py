"""Run a short-lived child to completion and collect its output, with little host work.

Host git runs ~15 times per governed run. asyncio's subprocess layer wraps every child in a
transport, a protocol and stream readers per pipe, a child watcher and a ``communicate``
task per stream: ~1 ms of the host process's CPU per child on top of the spawn itself. Here
the child is spawned by ``subprocess.Popen`` (vfork + exec, as asyncio does) and its pipes
and exit are read with three event-loop readers (the exit through a pidfd).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from synthorg.faultpoints import announce_child, held_argv
from synthorg.hostwork import HostWork, current
from synthorg.reaper import start as start_reaper
from synthorg.reaper import tie, untie

_CHUNK = 1 << 16
_TERM_GRACE_S = 5.0


class Child:
    """One child's pipes and exit, read by the running loop's readers."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes | None) -> None:
        self._loop = asyncio.get_running_loop()
        self.proc = proc
        self._out: dict[int, bytearray] = {}
        assert proc.stdout is not None and proc.stderr is not None
        self._fds = (proc.stdout.fileno(), proc.stderr.fileno())
        self._open = 0
        self._done = self._loop.create_future()
        self._pidfd = os.pidfd_open(proc.pid)
        self._exited = False
        self.usage: resource.struct_rusage | None = None
        """What the child (and the children it waited for) used, once reaped."""
        for fd in self._fds:
            os.set_blocking(fd, False)
            self._out[fd] = bytearray()
            self._open += 1
            self._loop.add_reader(fd, self._read, fd)
        self._loop.add_reader(self._pidfd, self._exit)
        self._open += 1
        self._stdin = memoryview(stdin) if stdin is not None else None
        if self._stdin is not None:
            assert proc.stdin is not None
            fd = proc.stdin.fileno()
            os.set_blocking(fd, False)
            self._open += 1
            self._loop.add_writer(fd, self._write, fd)

    def _closed_one(self) -> None:
        self._open -= 1
        if self._open == 0 and not self._done.done():
            self._done.set_result(None)

    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._out[fd] += data
            return
        self._loop.remove_reader(fd)
        self._closed_one()

    def _write(self, fd: int) -> None:
        assert self._stdin is not None
        try:
            sent = os.write(fd, self._stdin)
        except BlockingIOError:
            return
        except OSError:  # the child closed its stdin (exited): what it read is what counts
            sent = len(self._stdin)
        self._stdin = self._stdin[sent:]
        if not self._stdin:
            self._loop.remove_writer(fd)
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self._closed_one()

    def _exit(self) -> None:
        self._loop.remove_reader(self._pidfd)
        self._exited = True
        self._closed_one()

    async def finish(self, wall_s: float | None = None) -> tuple[int, bytes, bytes]:
        """Wait for EOF on its output and its exit: (returncode, stdout, stderr). Past
        ``wall_s`` its process group is SIGKILLed, reaped, and TimeoutError raised."""
        try:
            await asyncio.wait_for(asyncio.shield(self._done), wall_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            await asyncio.shield(self._stop())
            raise
        except BaseException:
            await asyncio.shield(self._stop())
            raise
        finally:
            self._close()
        returncode = self._reap()  # exited (the pidfd said so): reaps at once
        return returncode, bytes(self._out[self._fds[0]]), bytes(self._out[self._fds[1]])

    def _reap(self) -> int:
        """wait4 the exited child: its code, and its rusage kept for the run's budget."""
        if self.proc.returncode is None:
            _, status, self.usage = os.wait4(self.proc.pid, 0)
            self.proc.returncode = os.waitstatus_to_exitcode(status)
        return self.proc.returncode

    async def _stop(self) -> None:
        """Cancelled: SIGTERM first (git removes its lock files then), SIGKILL after a grace,
        and reaped either way, so no child outlives the call."""
        if not self._exited:
            self.proc.terminate()
            exited: asyncio.Future[None] = self._loop.create_future()

            def on_exit() -> None:
                if not exited.done():
                    exited.set_result(None)

            self._loop.add_reader(self._pidfd, on_exit)
            try:
                await asyncio.wait_for(exited, _TERM_GRACE_S)
            except TimeoutError:
                self.proc.kill()
            finally:
                self._loop.remove_reader(self._pidfd)
        self._reap()

    def _close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                fd = stream.fileno() if not stream.closed else -1
                if fd >= 0:
                    self._loop.remove_reader(fd)
                    self._loop.remove_writer(fd)
                    stream.close()
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)


async def run_collect(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdin: bytes | None
) -> tuple[int, bytes, bytes]:
    """Run argv in cwd with exactly env; (returncode, stdout, stderr). OSError when it cannot
    start. Cancelling the caller stops the child (SIGTERM, then SIGKILL) and reaps it.

    The child leads its own process group (what it forks goes with it). Inside a run
    (``hostwork.current``) it is that run's: confined, CPU-limited and charged, and killed
    past the wall budget; ``HostWorkExceeded`` then says which budget it went over."""
    work = current()
    what = _step_name(argv)
    if work is not None:
        work.before_spawn(what)
        argv = held_argv("host-work", argv)  # the fault suite holds a run's step here
    start_reaper()  # before the spawn: the tie below is then one write
    # Popen blocks only until the child has exec'd (vfork); the waiting is the readers'.
    with work.spawning() if work is not None else contextlib.nullcontext():
        proc = subprocess.Popen(  # noqa: ASYNC220
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
        )
    tie(proc.pid)  # a SIGKILLed host's `git add` of a huge tree dies with it (its group too)
    try:
        try:
            limit_s = work.adopt(proc.pid) if work is not None else 0
            child = Child(proc, stdin or None)
        except BaseException:
            proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            raise
        if work is None:
            return await child.finish()
        announce_child("host-work", argv, proc.pid)
        return await _finish_for(work, child, what, limit_s)
    finally:
        untie(proc.pid)


async def _finish_for(
    work: HostWork, child: Child, what: str, limit_s: int
) -> tuple[int, bytes, bytes]:
    """A run's child to its end within the step's wall budget, charged to the run."""
    try:
        returncode, out, err = await child.finish(wall_s=work.budget.wall_s)
    except TimeoutError:
        work.charge(child.usage, killed=False, limit_s=limit_s)
        raise work.exceeded(what, "wall") from None
    if work.charge(child.usage, killed=returncode == -signal.SIGKILL, limit_s=limit_s):
        raise work.exceeded(what, "cpu")  # the kernel's RLIMIT_CPU kill
    return returncode, out, err


def _step_name(argv: Sequence[str]) -> str:
    """``git add`` (quoted) for refusals: the program and its first word that is not an option (nor
    the value of git's ``-c``)."""
    words = iter(argv[1:])
    for word in words:
        if word == "-c":
            next(words, None)
        elif not word.startswith("-"):
            return f"`{os.path.basename(argv[0])} {word}`"
    return f"`{os.path.basename(argv[0])}`"
