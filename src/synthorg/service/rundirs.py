"""Per-process run dirs (``SYNTHORG_HOME/run/<pid>/``, the embedded sockets): sweep the dead's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from synthorg.processes import pid_alive


def sweep_dead_run_dirs(run_root: Path) -> list[Path]:
    """Remove the run dirs of processes of this host that no longer exist; returns them.

    A killed process (SIGKILL, OOM) cannot remove its own dir. A dir whose pid was reused
    by a live process stays until that process is gone too: harmless, it holds only sockets.
    """
    removed: list[Path] = []
    if not run_root.is_dir():
        return removed
    for child in run_root.iterdir():
        if not child.name.isdigit() or child.is_symlink() or not child.is_dir():
            continue
        pid = int(child.name)
        if pid == os.getpid() or pid_alive(pid):
            continue
        shutil.rmtree(child, ignore_errors=True)
        removed.append(child)
    return removed
