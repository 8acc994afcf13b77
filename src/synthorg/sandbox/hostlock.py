"""Host-only dirs owned by one live process: an ``flock`` on the dir's lock file.

The owner holds the lock for as long as it owns the dir; the kernel drops it when the owner
dies, so a sweeper that gets it knows the owner is gone (no pid that may have been reused)
and two sweepers never clean up the same dir at once.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def lock_dir(dir: Path, *, blocking: bool) -> int | None:
    """An exclusive lock on dir's lock file: its fd, or None when another process holds it."""
    fd = os.open(dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd
