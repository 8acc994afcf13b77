"""Where SynthOrg keeps its data: ``SYNTHORG_HOME`` (default ``~/.synthorg``)."""

from __future__ import annotations

import os
from pathlib import Path


def synthorg_home() -> Path:
    """The data dir: store, worktrees, runtimes, keys, logs."""
    raw = os.environ.get("SYNTHORG_HOME")
    return Path(raw).expanduser().resolve() if raw else Path.home() / ".synthorg"
