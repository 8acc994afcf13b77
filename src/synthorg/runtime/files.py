"""Find the shipped OpenHands runtime files (lockfile, entrypoint) for source and wheel installs.

The canonical copies live in the repository at ``runtimes/openhands/``. A wheel carries the
same directory as package data at ``synthorg/runtime/openhands_files/`` (hatch
``force-include``), so one lookup order serves both: explicit env override, package data,
then the source checkout. Nothing is duplicated in git, so the two can never drift.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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

_RUNTIME_PACKAGE = Path(__file__).resolve().parent
_SOURCE_RUNTIMES = Path(__file__).resolve().parents[3] / "runtimes"


def shipped_dir(name: str, *, env: str, required: Sequence[str], what: str) -> Path:
    """The directory of runtime ``name``'s shipped files (``runtimes/<name>/`` in a source
    checkout, ``synthorg/runtime/<name>_files/`` in a wheel): the one lookup order for every
    runtime, ``env`` first when set; ConfigError naming where it looked when none holds all
    of ``required``."""
    override = os.environ.get(env)
    candidates = (
        [Path(override)]
        if override
        else [_RUNTIME_PACKAGE / f"{name}_files", _SOURCE_RUNTIMES / name]
    )
    for candidate in candidates:
        if all((candidate / file).is_file() for file in required):
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise ConfigError(
        f"{what} ({', '.join(required)}) not found in: {tried}. Install synthorg from a "
        f"wheel that ships them, run from a source checkout, or set {env} to the "
        f"runtimes/{name} directory."
    )


def runtime_files_dir() -> Path:
    """The directory holding the OpenHands lockfile and entrypoint."""
    return shipped_dir(
        "openhands", env=FILES_ENV, required=REQUIRED, what="OpenHands runtime files"
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
