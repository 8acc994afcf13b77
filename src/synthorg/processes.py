"""Whether a process on this host is still alive: one rule for every record that names a pid
(a run's owner, a dead host's quota, a pool slot's process)."""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """Whether the process exists on this host and is not a zombie awaiting its parent."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: the signal probe is all we know
    return stat.rsplit(")", 1)[-1].split()[0] not in {"Z", "X"}
