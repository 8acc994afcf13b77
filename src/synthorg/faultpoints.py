"""Named points where a fault test stops a process on purpose (``SYNTHORG_PAUSE_AT``).

A kill or a freeze then lands at a chosen stage (in prepare, before the gate, ...) instead of
at a moment guessed by timing. Unset (always, outside the fault suite) a point costs one
environment lookup and does nothing.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

PAUSE_ENV = "SYNTHORG_PAUSE_AT"
"""Comma-separated names of the points this process stops at."""

ANNOUNCE = "SYNTHORG_PAUSED_AT"
"""What a stopped process prints on stderr (then the point's name): the test waits for it."""

GO_DIR_ENV = "SYNTHORG_PAUSE_DIR"
"""When set, a stopped point goes on once the file ``<dir>/<name>.go`` exists."""


async def pause_point(name: str) -> None:
    """Wait here when ``SYNTHORG_PAUSE_AT`` names this point, else return at once: forever,
    or with ``SYNTHORG_PAUSE_DIR`` until the test creates ``<dir>/<name>.go``.

    Only the calling task waits: the rest of the process (heartbeats, other runs) goes on, as
    when a step is merely slow, until the test kills, freezes or releases it.
    """
    go = _stopping_at(name)
    if go is None:
        return
    while not go.exists():  # noqa: ASYNC110  (a test's point: polling is the simple way)
        await asyncio.sleep(0.05)


def pause_here(name: str) -> None:
    """``pause_point`` for synchronous code (it blocks the calling thread, e.g. a teardown
    run in a worker thread)."""
    go = _stopping_at(name)
    if go is None:
        return
    while not go.exists():
        time.sleep(0.05)


_HELD = False
_STOPPER = ("/bin/sh", "-c", 'kill -STOP $$; exec "$@"', "sh")


def held_argv(name: str, argv: Sequence[str]) -> list[str]:
    """``argv``, or when ``SYNTHORG_PAUSE_AT`` names this point, ``argv`` behind a shell that
    stops itself first: the step's process is held (stopped) before it does anything, so it
    makes no progress and cannot end by itself, as a step stuck on a hostile tree; only a kill
    (its budget, its run's end, the reaper) ends it. Only the first such step of the process
    is held (later ones, cleanup included, go on); never released: a test kills it.
    Announce the spawned pid with ``announce_child``."""
    global _HELD
    if _HELD or _stopping_at(name) is None:
        return list(argv)
    _HELD = True
    return [*_STOPPER, *argv]


def announce_child(name: str, argv: Sequence[str], pid: int) -> None:
    """Say which child ``held_argv`` held (the test waits for this line)."""
    if tuple(argv[: len(_STOPPER)]) == _STOPPER:
        sys.stderr.write(f"{ANNOUNCE} {name} child {pid}\n")
        sys.stderr.flush()


def _stopping_at(name: str) -> Path | None:
    """None unless this process stops at ``name`` (then announced); the go-file to wait for
    (one that never appears without ``SYNTHORG_PAUSE_DIR``)."""
    wanted = os.environ.get(PAUSE_ENV)
    if not wanted or name not in wanted.split(","):
        return None
    sys.stderr.write(f"{ANNOUNCE} {name} pid {os.getpid()}\n")
    sys.stderr.flush()
    go_dir = os.environ.get(GO_DIR_ENV)
    return Path(go_dir) / f"{name}.go" if go_dir else Path("/proc/self/never-there")
