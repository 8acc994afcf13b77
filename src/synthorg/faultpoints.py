"""Named points where a fault test stops a process on purpose (``SYNTHORG_PAUSE_AT``).

A kill or a freeze then lands at a chosen stage (in prepare, before the gate, ...) instead of
at a moment guessed by timing. Unset (always, outside the fault suite) a point costs one
environment lookup and does nothing.
"""

from __future__ import annotations

import asyncio
import os
import sys

PAUSE_ENV = "SYNTHORG_PAUSE_AT"
"""Comma-separated names of the points this process stops at."""

ANNOUNCE = "SYNTHORG_PAUSED_AT"
"""What a stopped process prints on stderr (then the point's name): the test waits for it."""


async def pause_point(name: str) -> None:
    """Wait here forever when ``SYNTHORG_PAUSE_AT`` names this point, else return at once.

    Only the calling task waits: the rest of the process (heartbeats, other runs) goes on, as
    when a step is merely slow, until the test kills or freezes it.
    """
    wanted = os.environ.get(PAUSE_ENV)
    if not wanted or name not in wanted.split(","):
        return
    sys.stderr.write(f"{ANNOUNCE} {name} pid {os.getpid()}\n")
    sys.stderr.flush()
    await asyncio.Event().wait()
