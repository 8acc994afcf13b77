"""Install a hash-pinned lockfile into a fresh venv with uv, reporting progress by phase.

uv instead of the venv's own pip: with uv's cache a cold build of the OpenHands lock takes
seconds of download and install instead of pip's ~10 minutes, and a rebuild reuses the cache.
``--require-hashes --no-deps`` keeps the same guarantee as before: exactly the locked files,
each verified against its pinned sha256, nothing resolved from the index.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from synthorg.errors import BoundaryError, ConfigError

OutputCallback = Callable[[str], None]

HEARTBEAT_S = 10.0
"""A phase silent for this long prints that it is still running (no silent minutes)."""

# uv's summary lines, each mapped to the phase that is running once it is printed (so the
# heartbeat names what is going on: after "Resolved" it downloads, after "Installed" it
# compiles bytecode).
_PHASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^Resolved \d+ packages?"), "download"),
    (re.compile(r"^(Downloading|Downloaded) "), "download"),
    (re.compile(r"^Prepared \d+ packages?"), "install"),
    (re.compile(r"^Installed \d+ packages?"), "compile"),
    (re.compile(r"^Bytecode compiled"), "verify"),
)

# uv's trace lines (``-vv``) that mark one package done: the counts of "download n of m" and
# "install n of N". Only counted, never shown; a uv that words them otherwise loses the
# counts, not the phases.
_RESOLVED = re.compile(r"^Resolved (\d+) packages?")
_UNCACHED = re.compile(r"^DEBUG Identified uncached distribution: ")
_FETCHED = re.compile(r"^TRACE Released lock at `.*/wheels-v\d+/.*\.lock`")
_EXTRACTED = re.compile(r"^TRACE Extracted wheel files ")
_TRACING = ("DEBUG ", "TRACE ", "WARN ", "INFO ")


@dataclass(frozen=True)
class Step:
    """One command of a build: its argv and the phase it starts in."""

    argv: Sequence[str]
    phase: str
    what: str


def find_uv() -> Path:
    """The uv binary: the one shipped with the ``uv`` package, else ``uv`` on PATH."""
    try:
        from uv import find_uv_bin  # only the runtime build needs it

        return Path(find_uv_bin())
    except (ImportError, FileNotFoundError):
        pass
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory) / "uv"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ConfigError(
        "uv is needed to build runtimes: `pip install uv` into synthorg's environment or put "
        "uv on PATH (the all-in-one image ships it only when built with WITH_OPENHANDS=1)"
    )


def venv_step(uv: Path, base_python: Path, target: Path) -> Step:
    """Create an empty venv (no pip: uv installs into it from outside)."""
    argv = [str(uv), "venv", "--no-project", "--python", str(base_python), str(target)]
    return Step(argv, "venv", "creating the venv")


def install_step(uv: Path, lockfile: Path, venv_python: Path) -> Step:
    """Install exactly the locked, hash-verified files, and precompile their bytecode.

    The venv is bound read-only into sandboxes, so bytecode not compiled here would be
    recompiled on every run's import (seconds of the cold start).
    """
    argv = [
        str(uv),
        "pip",
        "install",
        "-vv",  # per-package trace lines: the download and install counts (_Counts)
        "--require-hashes",
        "--no-deps",
        "--compile-bytecode",
        "--python",
        str(venv_python),
        "-r",
        str(lockfile),
    ]
    return Step(argv, "resolve", "install of the OpenHands lockfile (uv pip, --require-hashes)")


def run_step(step: Step, env: dict[str, str], on_output: OutputCallback) -> None:
    """Run one step, relaying its lines with their phase and a heartbeat when it is quiet."""
    started = time.monotonic()
    on_output(f"[{step.phase}] {step.what}")
    try:
        proc = subprocess.Popen(
            list(step.argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**env, "NO_COLOR": "1", "UV_NO_PROGRESS": "1", "OPENHANDS_SUPPRESS_BANNER": "1"},
        )
    except OSError as exc:
        raise BoundaryError(f"could not start {step.what}: {exc}") from exc
    with proc:
        assert proc.stdout is not None
        phase, tail = _relay(proc.stdout, step.phase, started, on_output)
    if proc.returncode != 0:
        detail = "\n".join(tail)
        raise BoundaryError(f"{step.what} failed with exit code {proc.returncode}:\n{detail}")
    on_output(f"[{phase}] done in {time.monotonic() - started:.1f} s")


def _relay(
    stream: IO[str], phase: str, started: float, on_output: OutputCallback
) -> tuple[str, list[str]]:
    """Forward lines tagged with the current phase; speak up when the process is quiet."""
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_pump, args=(stream, lines), daemon=True)
    reader.start()
    tail: list[str] = []
    counts = _Counts()
    while (line := _next_line(lines, phase, started, on_output)) is not None:
        if line.startswith(_TRACING):
            if (progress := counts.feed(line)) is not None:
                on_output(progress)
            continue
        counts.feed(line)
        tail = [*tail[-19:], line]
        phase = _phase_of(line, phase)
        if not line.startswith(" + "):  # uv lists every installed package: too much to show
            on_output(f"[{phase}] {line}")
    reader.join()
    return phase, tail


@dataclass
class _Counts:
    """Packages fetched and installed so far, read from uv's trace lines."""

    total: int = 0
    to_fetch: int = 0
    fetched: int = 0
    installed: int = 0

    def feed(self, line: str) -> str | None:
        """Count ``line``; a progress line to show at every tenth of the way, else None."""
        if resolved := _RESOLVED.search(line):
            self.total = int(resolved[1])
        elif _UNCACHED.search(line):
            self.to_fetch += 1
        elif _FETCHED.search(line):
            self.fetched += 1
            return _every_tenth("download", self.fetched, self.to_fetch)
        elif _EXTRACTED.search(line):
            self.installed += 1
            return _every_tenth("install", self.installed, self.total)
        return None


def _every_tenth(phase: str, done: int, of: int) -> str | None:
    if not 0 < done <= of or (done != of and done % max(1, of // 10)):
        return None
    return f"[{phase}] {done} of {of}"


def _next_line(
    lines: queue.Queue[str | None], phase: str, started: float, on_output: OutputCallback
) -> str | None:
    while True:
        try:
            return lines.get(timeout=HEARTBEAT_S)
        except queue.Empty:
            on_output(f"[{phase}] still running ({time.monotonic() - started:.0f} s)")


def _phase_of(line: str, current: str) -> str:
    for pattern, name in _PHASES:
        if pattern.search(line):
            return name
    return current


def _pump(stream: IO[str], out: queue.Queue[str | None]) -> None:
    try:
        for raw in stream:
            out.put(raw.rstrip("\n"))
    finally:
        out.put(None)
