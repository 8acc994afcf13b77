"""A running sandboxed subprocess: line streaming, watchdog timeouts, exit verdict, teardown."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import signal
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from synthorg.sandbox.errors import SandboxIOError
from synthorg.sandbox.protocol import ExitReason, SandboxExit, SandboxLimits

#: asyncio's stream limit: one event line can be tens of KB; refuse only absurd ones.
STREAM_LIMIT = 32 * 1024 * 1024
_STDERR_TAIL = 64 * 1024
_QUEUE_LINES = 1024
_REAP_TIMEOUT_S = 5.0
_EOF = object()
_SIGXCPU = int(signal.SIGXCPU)


@dataclass(frozen=True)
class Verdicts:
    """What the backend's accounting says about the run after it ended."""

    oom_killed: bool = False
    pids_cap_hit: bool = False
    peak_processes: int | None = None


class RunControl(Protocol):
    """Backend hooks: kill everything of this run, read its verdicts, clean up."""

    def kill(self) -> None:
        """SIGKILL the run's whole process tree (synchronous, idempotent)."""
        ...

    def verdicts(self) -> Verdicts:
        """Resource-cap verdicts, read after the process ended."""
        ...

    def cleanup(self) -> None:
        """Release host resources (cgroups, temp dirs); called once, after exit."""
        ...


async def start_uncancellable(start: Coroutine[Any, Any, ManagedProcess]) -> ManagedProcess:
    """Finish a start-up even if the caller is cancelled meanwhile, then tear it down.

    Cancelling a half-started sandbox would lose track of what already runs (asyncio kills
    only the direct child; the sandbox's pid-1 is not known yet): start-up is short and
    bounded, so let it complete, kill the whole sandbox through its pid-1, then re-raise.
    """
    task = asyncio.ensure_future(start)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if task.cancelled() or task.exception() is not None:
        if cancelled:
            raise asyncio.CancelledError
        return task.result()  # re-raises the start-up error
    process = task.result()
    if cancelled:
        await process.close()
        raise asyncio.CancelledError
    return process


class ManagedProcess:
    """SandboxProcess over an asyncio subprocess whose kill/cleanup the backend supplies."""

    def __init__(
        self, proc: asyncio.subprocess.Process, control: RunControl, limits: SandboxLimits
    ) -> None:
        assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
        self._proc = proc
        self._control = control
        self._limits = limits
        self._started = time.monotonic()
        self._last_activity = self._started
        self._lines: asyncio.Queue[object] = asyncio.Queue(_QUEUE_LINES)
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self._requested: ExitReason | None = None
        self._request_message = ""
        self._exit: SandboxExit | None = None
        self._teardown_task: asyncio.Task[SandboxExit] | None = None
        self._tasks = [
            asyncio.create_task(self._read_stdout(proc.stdout)),
            asyncio.create_task(self._read_stderr(proc.stderr)),
            asyncio.create_task(self._watchdog()),
            asyncio.create_task(self._reap_leftovers()),
        ]

    @property
    def control(self) -> RunControl:
        """The backend's kill/cleanup handle (a pool hands a started sandbox over with it)."""
        return self._control

    def restart_clock(self) -> None:
        """The wall-clock and idle limits count from now: a pooled sandbox's run starts when
        it is handed its run, not when it was started to wait for one."""
        self._started = self._last_activity = time.monotonic()

    @property
    def pid(self) -> int:
        """Host pid of the direct child (bwrap itself, or the local process)."""
        return self._proc.pid

    @property
    def exit(self) -> SandboxExit | None:
        return self._exit

    @property
    def stderr_tail(self) -> str:
        return b"".join(self._stderr)[-_STDERR_TAIL:].decode("utf-8", "replace")

    async def send_line(self, line: str) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        if stdin.is_closing():
            raise SandboxIOError("the sandboxed process's stdin is closed; it has ended")
        try:
            stdin.write(line.encode() + b"\n")
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise SandboxIOError("the sandboxed process stopped reading its stdin") from exc

    def close_stdin(self) -> None:
        """Signal end of input; a well-behaved program then finishes on its own."""
        assert self._proc.stdin is not None
        self._proc.stdin.close()

    def __aiter__(self) -> ManagedProcess:
        return self

    async def __anext__(self) -> str:
        if self._exit is not None and self._lines.empty():
            raise StopAsyncIteration
        item = await self._lines.get()
        if item is _EOF:
            self._lines.put_nowait(_EOF)  # later iterations end too
            await self._wait_exit()
            raise StopAsyncIteration
        assert isinstance(item, str)
        return item

    async def stop(self, grace_s: float = 0.0) -> SandboxExit:
        """Close stdin, wait up to grace_s for a natural end, then tear everything down."""
        if self._exit is not None:
            return self._exit
        if grace_s > 0:
            with contextlib.suppress(OSError):
                self.close_stdin()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._proc.wait()), grace_s)
        if self._proc.returncode is None:
            self._request_kill(ExitReason.STOPPED, "stopped on request")
        return await self.close()

    async def close(self) -> SandboxExit:
        """Tear down (kill if still running, reap, clean up); completes even if cancelled."""
        if self._proc.returncode is None and self._requested is None:
            self._request_kill(ExitReason.STOPPED, "stopped: the consumer left the stream")
        if self._teardown_task is None:
            self._teardown_task = asyncio.create_task(self._teardown())
        cancelled = False
        while not self._teardown_task.done():
            try:
                await asyncio.shield(self._teardown_task)
            except asyncio.CancelledError:
                cancelled = True  # finish tearing down first, then honour the cancel
        if cancelled:
            raise asyncio.CancelledError
        return self._teardown_task.result()

    def _request_kill(self, reason: ExitReason, message: str) -> None:
        if self._requested is None:
            self._requested, self._request_message = reason, message
        self._control.kill()

    async def _wait_exit(self) -> SandboxExit:
        await self._proc.wait()
        return await self.close()

    async def _teardown(self) -> SandboxExit:
        try:
            await asyncio.wait_for(self._proc.wait(), _REAP_TIMEOUT_S)
        except TimeoutError:  # the backend's kill did not take: kill the direct child too
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self._proc.wait()
        self._control.kill()  # sweep leftovers of a natural end too (local process groups)
        # Let stderr drain so the tail explains the end; stdout may sit on a full queue.
        await asyncio.wait([self._tasks[1]], timeout=0.5)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        verdicts = self._control.verdicts()
        # Off the event loop: cleanup can take a while (cgroup rmdir retries, the quota's
        # copy back and unmounts) and other runs share this loop.
        await asyncio.to_thread(self._control.cleanup)
        self._exit = self._classify(self._proc.returncode, verdicts)
        if self._lines.empty():
            self._lines.put_nowait(_EOF)
        return self._exit

    def _classify(self, rc: int | None, v: Verdicts) -> SandboxExit:
        requested, limits = self._requested, self._limits
        reason: ExitReason
        if requested is ExitReason.STOPPED:
            reason, message = requested, self._request_message
        elif v.oom_killed:
            reason = ExitReason.MEMORY_LIMIT
            message = f"killed: exceeded the memory cap of {limits.memory_bytes} bytes"
        elif v.pids_cap_hit and (requested is not None or rc != 0):
            reason = ExitReason.PROCESS_LIMIT
            message = f"hit the process cap of {limits.max_processes}"
            if requested is not None:
                message += f", then {self._request_message}"
        elif requested is not None:
            reason, message = requested, self._request_message
        elif limits.cpu_seconds is not None and rc in (128 + _SIGXCPU, -_SIGXCPU):
            reason = ExitReason.TIMEOUT
            message = f"killed: CPU-time limit of {limits.cpu_seconds}s per process (RLIMIT_CPU)"
        elif rc is not None and (rc < 0 or rc == 128 + 9):
            reason, message = ExitReason.KILLED, f"killed by a signal (status {rc})"
        else:
            reason, message = ExitReason.COMPLETED, f"exited with status {rc}"
            if v.pids_cap_hit:
                message += f" (it hit the process cap of {limits.max_processes} on the way)"
        return SandboxExit(
            returncode=rc,
            reason=reason,
            message=message,
            stderr_tail=self.stderr_tail,
            peak_processes=v.peak_processes,
            duration_s=round(time.monotonic() - self._started, 4),
        )

    async def _read_stdout(self, stdout: asyncio.StreamReader) -> None:
        try:
            while line := await stdout.readline():
                self._last_activity = time.monotonic()
                await self._lines.put(line.decode("utf-8", "replace").removesuffix("\n"))
                self._last_activity = time.monotonic()  # a slow consumer is not idleness
        except ValueError:
            self._request_kill(ExitReason.ERROR, f"a stdout line exceeded {STREAM_LIMIT} bytes")
        finally:
            self._late_eof()

    def _late_eof(self) -> None:
        """Queue the end marker; with a full queue, retry until the consumer drains it."""
        try:
            self._lines.put_nowait(_EOF)
        except asyncio.QueueFull:
            if self._exit is None:  # after teardown nobody is left to read: stop retrying
                asyncio.get_running_loop().call_later(0.01, self._late_eof)

    async def _read_stderr(self, stderr: asyncio.StreamReader) -> None:
        while chunk := await stderr.read(65536):
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size - len(self._stderr[0]) >= _STDERR_TAIL:
                self._stderr_size -= len(self._stderr.popleft())

    async def _reap_leftovers(self) -> None:
        """When the main process ends, kill what it left (it may hold stdout open)."""
        await self._proc.wait()
        self._control.kill()

    async def _watchdog(self) -> None:
        idle = self._limits.idle_timeout_s
        while self._proc.returncode is None:
            now = time.monotonic()
            wall_deadline = self._started + self._limits.wall_timeout_s  # restart_clock moves it
            if now >= wall_deadline:
                limit = self._limits.wall_timeout_s
                self._request_kill(ExitReason.TIMEOUT, f"killed: wall-clock limit of {limit}s")
                return
            if idle is not None and now - self._last_activity >= idle:
                self._request_kill(ExitReason.IDLE_TIMEOUT, f"killed: no output line for {idle}s")
                return
            deadline = wall_deadline
            if idle is not None:
                deadline = min(deadline, self._last_activity + idle)
            await asyncio.sleep(max(deadline - now, 0.005))
