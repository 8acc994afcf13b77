"""SIGTERM and SIGHUP end a command exactly as Ctrl-C does (cancel, tear down, resumable).

``kill``, systemd and ``docker stop`` send SIGTERM; a closed terminal sends SIGHUP. Both are
forwarded as SIGINT, so asyncio's own Ctrl-C path (cancel the main task, then exit) is the
one path for all three, including its "a second signal stops at once" behaviour.
"""

from __future__ import annotations

import asyncio
import signal

FORWARDED = (signal.SIGTERM, signal.SIGHUP)


def _interrupt() -> None:
    signal.raise_signal(signal.SIGINT)


def treat_termination_as_interrupt() -> None:
    """For the running event loop's lifetime (its close removes the handlers)."""
    loop = asyncio.get_running_loop()
    for signum in FORWARDED:
        loop.add_signal_handler(signum, _interrupt)
