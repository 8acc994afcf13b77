"""Find the shipped OpenHands runtime files (lockfile, entrypoint) for source and wheel installs.

The canonical copies live in the repository at ``runtimes/openhands/``. A wheel carries the
same directory as package data at ``synthorg/runtime/openhands_files/`` (hatch
``force-include``), so one lookup order serves both: explicit env override, package data,
then the source checkout. Nothing is duplicated in git, so the two can never drift.
"""

from __future__ import annotations

import os
from pathlib import Path

from synthorg.errors import ConfigError

FILES_ENV = "SYNTHORG_OPENHANDS_FILES"
"""Operator override: a directory holding the lockfile and the entrypoint's modules."""

REQUIRED = (
    "requirements.lock",
    "run_task.py",
    "synthorg_oh_events.py",
    "synthorg_oh_terminal.py",
)
"""What the directory must hold; the sandbox binds the whole directory read-only."""

_PACKAGE_DATA = Path(__file__).resolve().parent / "openhands_files"
_SOURCE_TREE = Path(__file__).resolve().parents[3] / "runtimes" / "openhands"


def runtime_files_dir() -> Path:
    """The directory holding the OpenHands lockfile and entrypoint."""
    override = os.environ.get(FILES_ENV)
    candidates = [Path(override)] if override else [_PACKAGE_DATA, _SOURCE_TREE]
    for candidate in candidates:
        if all((candidate / name).is_file() for name in REQUIRED):
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise ConfigError(
        f"OpenHands runtime files ({', '.join(REQUIRED)}) not found in: {tried}. "
        f"Install synthorg from a wheel that ships them, run from a source checkout, "
        f"or set {FILES_ENV} to the runtimes/openhands directory."
    )


def lockfile_path() -> Path:
    """The hash-pinned lockfile of openhands-sdk + openhands-tools and their closure."""
    return runtime_files_dir() / "requirements.lock"


def entrypoint_path() -> Path:
    """``run_task.py``, run inside the sandbox by the runtime venv's python.

    It imports ``synthorg_oh_events`` and ``synthorg_oh_terminal`` from its own directory: bind
    ``entrypoint.parent``.
    """
    return runtime_files_dir() / "run_task.py"
