"""Per-repository mutual exclusion: an asyncio lock in-process plus an flock across processes."""

from __future__ import annotations

import asyncio
import fcntl
import os
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

# asyncio locks bind to the loop that first contends them, so keep one table per loop.
_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _loop_lock(key: str) -> asyncio.Lock:
    table = _LOCKS.setdefault(asyncio.get_running_loop(), {})
    lock = table.get(key)
    if lock is None:
        lock = table[key] = asyncio.Lock()
    return lock


@asynccontextmanager
async def exclusive(lock_file: Path, *, poll: float = 0.005) -> AsyncIterator[None]:
    """Hold ``lock_file`` exclusively against this process's tasks and other processes.

    The flock is taken non-blocking in a polling loop rather than in a worker thread: a
    cancelled waiter then never acquires the lock later behind our back.
    """
    async with _loop_lock(str(lock_file)):
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(poll)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def in_process_lock(key: str) -> asyncio.Lock:
    """The in-process asyncio lock for ``key`` (for state that only one process touches)."""
    return _loop_lock(key)
