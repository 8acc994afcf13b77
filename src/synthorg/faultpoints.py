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
