"""SIGTERM and SIGHUP treated exactly like Ctrl-C while a run is in the foreground.

``kill``, systemd and ``docker stop`` send SIGTERM; closing the terminal sends SIGHUP. Both
are re-raised as SIGINT, so they take the one cancellation path Ctrl-C takes (asyncio's
runner cancels the main task; ``synthorg run`` cancels the run, tears the sandbox down and
leaves the conversation resumable).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

TERMINATING = (signal.SIGTERM, signal.SIGHUP)


def _as_interrupt(_signum: int, _frame: FrameType | None) -> None:
    signal.raise_signal(signal.SIGINT)


@contextmanager
def terminate_like_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP do what Ctrl-C does; the old handlers after."""
    previous = {sig: signal.signal(sig, _as_interrupt) for sig in TERMINATING}
    if not callable(signal.getsignal(signal.SIGINT)):
        # Started with SIGINT ignored (a background job): without a handler, SIGTERM would be
        # ignored too. asyncio's runner builds its cancellation on this default handler.
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Within the block, Ctrl-C, SIGTERM and SIGHUP are ignored (a short, bounded teardown
    after the work is done and recorded); the old handlers after."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, *TERMINATING)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
