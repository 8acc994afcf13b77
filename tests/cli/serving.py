"""A real `synthorg serve` subprocess for the CLI tests, its log read as it is written."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.cli.cli_support import SYNTHORG, cli_env


class Serve:
    """A running serve: its process and the lines of its log so far (read by a thread)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self.lines.append("")  # EOF: the process has closed its stderr
            self._changed.notify_all()

    def wait_for(self, *parts: str, timeout: float = 180) -> str:
        """The first log line containing every one of ``parts`` (AssertionError after
        ``timeout`` or when the serve exits first)."""

        def found() -> str | None:
            for line in self.lines:
                if all(part in line for part in parts):
                    return line
            return "" if self.lines and self.lines[-1] == "" else None

        with self._changed:
            line = self._changed.wait_for(found, timeout)
        assert line, f"serve never logged {parts}:\n{''.join(self.lines)[-4000:]}"
        return line

    def close(self) -> None:
        """After the process has exited: the reader done, the pipe closed."""
        self._reader.join(30)
        assert self.proc.stderr is not None
        self.proc.stderr.close()

    def log(self) -> str:
        """Everything it logged so far."""
        with self._changed:
            return "".join(self.lines)


@contextmanager
def serving(home: Path, config: Path, **env: str) -> Iterator[Serve]:
    """`synthorg serve` over ``home`` until the block ends (SIGTERM then; killed if stuck),
    yielded once it has started and listens on its local socket."""
    proc = subprocess.Popen(
        [*SYNTHORG, "serve", "--port", "0", "-c", str(config)],
        env=cli_env(home, SYNTHORG_LOG_LEVEL=env.pop("SYNTHORG_LOG_LEVEL", "INFO"), **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    serve = Serve(proc)
    try:
        serve.wait_for('"SERVE_LOCAL_SOCKET"')
        serve.wait_for('"SERVER_STARTED"')
        yield serve
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        serve.close()
