"""Named points where a fault test stops a process on purpose (``SYNTHORG_PAUSE_AT``).

A kill or a freeze then lands at a chosen stage (in prepare, before the gate, ...) instead of
at a moment guessed by timing. Unset (always, outside the fault suite) a point costs one
environment lookup and does nothing.
"""

from __future__ import annotations

import asyncio
import os
import sys
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
    wanted = os.environ.get(PAUSE_ENV)
    if not wanted or name not in wanted.split(","):
        return
    sys.stderr.write(f"{ANNOUNCE} {name} pid {os.getpid()}\n")
    sys.stderr.flush()
    go_dir = os.environ.get(GO_DIR_ENV)
    if not go_dir:
        await asyncio.Event().wait()
        return
    go = Path(go_dir) / f"{name}.go"
    while not go.exists():  # noqa: ASYNC110  (a test's point: polling is the simple way)
        await asyncio.sleep(0.05)
