"""One live process per eval: a lock in the data dir, so a resume beside a live run is refused.

An ``flock`` the kernel drops when its holder dies (a SIGKILLed run frees it at once, so resume
after a crash is never refused), holding a line that says who has it for the refusal to show.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from synthorg.errors import ConflictError


class EvalBusyError(ConflictError):
    """Another live process is running this eval."""

    def __init__(self, eval_id: str, holder: str) -> None:
        super().__init__(
            f"eval {eval_id} is being run by {holder or 'another live process'}; wait for it to "
            f"end (or stop it), then `synthorg eval resume {eval_id}`"
        )


@contextmanager
def owning(home: Path, eval_id: str) -> Iterator[None]:
    """Hold the eval for this process; EvalBusyError when a live process holds it."""
    path = home / "eval" / eval_id / "owner.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            raise EvalBusyError(eval_id, holder) from None
        since = datetime.now(UTC).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {since}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
