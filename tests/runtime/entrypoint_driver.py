"""Drive run_task.py as a real subprocess: write the spec and control lines, read JSON events."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from synthorg.runtime import OpenHandsRuntime

# What a sandbox would give the entrypoint: no trace of the main venv or the host's HOME.
CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}

# The SDK's import alone is ~5 s of CPU and took 169 s on a machine at load 30: a wait is a
# bound on a hung entrypoint, not a speed target (the per-test timeout is 300 s).
WAIT_S = 240.0


class EntrypointRun:
    """One entrypoint process; every stdout line must parse as a JSON object."""

    live: ClassVar[set[EntrypointRun]] = set()
    """Runs not yet finished or killed: a failed test's run is killed after it (kill_all)."""

    def __init__(
        self,
        runtime: OpenHandsRuntime,
        spec: dict[str, Any] | None,
        stderr: Path,
        args: Sequence[str] = (),
    ) -> None:
        """Start it with ``args`` after the script; send ``spec`` at once (None: later)."""
        self.events: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.started = time.monotonic()
        self._stderr = stderr.open("w")
        self.proc = subprocess.Popen(
            [str(runtime.python), str(runtime.entrypoint), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=CLEAN_ENV,
            cwd="/",
        )
        EntrypointRun.live.add(self)
        if spec is not None:
            self.send(spec)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            record = json.loads(line)  # a non-JSON line fails the reader loudly
            assert isinstance(record, dict), line
            self._queue.put(record)
        self._queue.put(None)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def wait_for(self, kind: str, timeout: float = WAIT_S, **match: Any) -> dict[str, Any]:
        """Consume events until one of ``kind`` whose fields equal ``match``."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {kind} {match} within {timeout}s; got {self.kinds()}")
            try:
                record = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if record is None:
                raise AssertionError(f"stream ended before {kind} {match}; got {self.kinds()}")
            self.events.append(record)
            if record.get("kind") == kind and all(record.get(k) == v for k, v in match.items()):
                return record

    def finish(self, timeout: float = WAIT_S) -> int:
        """Drain the stream to its end and return the exit code."""
        deadline = time.monotonic() + timeout
        while (
            record := self._queue.get(timeout=max(0.1, deadline - time.monotonic()))
        ) is not None:
            self.events.append(record)
        code = self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        self._close_pipes()
        return code

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._close_pipes()

    @classmethod
    def kill_all(cls) -> None:
        """Kill every run still going, closing its pipes (else they leak into a later test)."""
        for run in list(cls.live):
            run.kill()

    def _close_pipes(self) -> None:
        EntrypointRun.live.discard(self)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                # The process may be gone: nothing left to flush.
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()
        self._stderr.close()

    def kinds(self) -> list[str]:
        return [str(e.get("kind")) for e in self.events]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("kind") == kind]
