"""Locate and build the isolated OpenHands runtime venv under ``SYNTHORG_HOME``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from synthorg.errors import BoundaryError
from synthorg.paths import synthorg_home
from synthorg.runtime.files import entrypoint_path, lockfile_path
from synthorg.runtime.installer import OutputCallback
from synthorg.runtime.venvbuild import (
    build_lock,
    build_venv,
)

MARKER_NAME = ".synthorg-runtime.json"
"""Written inside a runtime dir only after a successful build: its presence means 'built'."""


def _home(home: Path | None) -> Path:
    """``home`` if given, else the data dir (``$SYNTHORG_HOME``, default ``~/.synthorg``)."""
    return home if home is not None else synthorg_home()


class OpenHandsRuntime(BaseModel):
    """A built OpenHands runtime venv (the SDK lives only here, never in the main venv)."""

    model_config = ConfigDict(frozen=True)

    venv_path: Path = Field(description="Root of the runtime venv (bind it read-only).")
    python: Path = Field(description="The venv's interpreter; run the entrypoint with it.")
    interpreter_prefix: Path = Field(
        description="Install prefix of the base CPython the venv links to (bind it read-only)."
    )
    entrypoint: Path = Field(description="The in-sandbox entrypoint script run_task.py.")
    lock_hash: str = Field(description="First 16 hex chars of sha256(requirements.lock).")


class RuntimeStatus(BaseModel):
    """What ``synthorg runtime status`` / ``doctor`` report about the OpenHands runtime."""

    model_config = ConfigDict(frozen=True)

    built: bool = Field(description="True when a completed build for the current lock exists.")
    lock_hash: str = Field(description="Hash of the lockfile the runtime must match.")
    venv_path: Path = Field(description="Where the runtime venv lives (or would live).")
    python: Path | None = Field(description="The runtime's interpreter, when built.")
    entrypoint: Path = Field(description="The entrypoint script that runs inside the sandbox.")


def lock_hash(lockfile: Path | None = None) -> str:
    """First 16 hex chars of the sha256 of the lockfile bytes: the runtime's identity."""
    data = (lockfile or lockfile_path()).read_bytes()
    return hashlib.sha256(data).hexdigest()[:16]


def runtime_dir(home: Path | None = None, lockfile: Path | None = None) -> Path:
    """``SYNTHORG_HOME/runtimes/openhands/<lock hash>``."""
    return _home(home) / "runtimes" / "openhands" / lock_hash(lockfile)


def _runtime_from_dir(venv: Path, digest: str) -> OpenHandsRuntime | None:
    marker = venv / MARKER_NAME
    python = venv / "bin" / "python"
    if not marker.is_file() or not python.exists():
        return None
    try:
        meta = json.loads(marker.read_text())
        prefix = Path(meta["interpreter_prefix"])
    except (OSError, ValueError, KeyError) as exc:
        raise BoundaryError(
            f"runtime marker {marker} is unreadable; delete {venv} and run "
            "`synthorg runtime build openhands` again"
        ) from exc
    return OpenHandsRuntime(
        venv_path=venv,
        python=python,
        interpreter_prefix=prefix,
        entrypoint=entrypoint_path(),
        lock_hash=digest,
    )


def find_runtime(home: Path | None = None) -> OpenHandsRuntime | None:
    """The built runtime matching the current lockfile, or None if it was never built."""
    digest = lock_hash()
    return _runtime_from_dir(_home(home) / "runtimes" / "openhands" / digest, digest)


def runtime_status(home: Path | None = None) -> RuntimeStatus:
    """Built or not, with the paths an operator needs to see."""
    venv = runtime_dir(home)
    found = find_runtime(home)
    return RuntimeStatus(
        built=found is not None,
        lock_hash=lock_hash(),
        venv_path=venv,
        python=found.python if found else None,
        entrypoint=entrypoint_path(),
    )


def build_runtime(
    home: Path | None = None,
    on_output: OutputCallback = lambda _line: None,
    *,
    base_python: Path | None = None,
    force: bool = False,
) -> OpenHandsRuntime:
    """Build (or reuse) the runtime venv for the current lockfile; atomic via temp dir + rename.

    uv installs the lock into the new venv with ``--require-hashes --no-deps`` (never the
    main venv); ``on_output`` gets one line per phase (venv, resolve, download, install,
    compile, verify), a heartbeat when a phase is quiet, and uv's own messages.
    """
    lockfile = lockfile_path()
    digest = lock_hash(lockfile)
    parent = _home(home) / "runtimes" / "openhands"
    final = parent / digest
    with build_lock(parent):
        existing = _runtime_from_dir(final, digest)
        if existing is not None and not force:
            on_output(f"OpenHands runtime {digest} already built at {final}")
            return existing
        marker = build_venv(
            final,
            lockfile,
            what="OpenHands",
            verify=["-c", "import openhands.sdk, openhands.tools"],
            verify_what="the import check of openhands.sdk",
            marker_name=MARKER_NAME,
            on_output=on_output,
            base_python=base_python,
        )
    on_output(f"OpenHands runtime {digest} built at {final} in {marker['build_seconds']} s")
    built = _runtime_from_dir(final, digest)
    assert built is not None
    return built
