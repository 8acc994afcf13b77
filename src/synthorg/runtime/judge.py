"""Locate and build the judge's runtime: a hash-pinned pytest venv hidden checks run with.

The hidden check must not run a test runner the judged tree can shadow, nor the base
interpreter (which has no pytest). This venv holds pytest and its closure only, installed from
``runtimes/judge/requirements.lock`` with ``--require-hashes`` (the same installer as the
OpenHands runtime), under ``SYNTHORG_HOME/runtimes/judge/<lock hash>``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from synthorg.paths import synthorg_home
from synthorg.runtime.files import shipped_dir
from synthorg.runtime.installer import OutputCallback
from synthorg.runtime.venvbuild import build_lock, build_venv

FILES_ENV = "SYNTHORG_JUDGE_FILES"
"""Operator override: a directory holding the judge's lockfile and pytest.ini."""

REQUIRED = ("requirements.lock", "pytest.ini")
"""What the judge's files directory must hold (bound read-only into the check's sandbox)."""

MARKER_NAME = ".synthorg-judge.json"
"""Written inside the venv only after a successful build: its presence means 'built'."""


class JudgeRuntime(BaseModel):
    """A built judge venv and the files the check binds beside it."""

    model_config = ConfigDict(frozen=True)

    venv_path: Path = Field(description="Root of the judge venv (bound read-only).")
    python: Path = Field(description="The venv's interpreter: runs pytest for the check.")
    interpreter_prefix: Path = Field(description="The base CPython's prefix (bound read-only).")
    files_dir: Path = Field(description="The judge's lockfile and pytest.ini (bound read-only).")
    lock_hash: str = Field(description="First 16 hex chars of sha256(requirements.lock).")

    @property
    def ini(self) -> Path:
        """The judge-owned pytest configuration (``-c``)."""
        return self.files_dir / "pytest.ini"


def files_dir() -> Path:
    """The directory holding the judge's lockfile and pytest.ini."""
    return shipped_dir("judge", env=FILES_ENV, required=REQUIRED, what="the judge's files")


def lock_hash() -> str:
    """The judge runtime's identity: the lockfile's sha256, first 16 hex chars."""
    return hashlib.sha256((files_dir() / "requirements.lock").read_bytes()).hexdigest()[:16]


def _parent(home: Path | None) -> Path:
    return (home if home is not None else synthorg_home()) / "runtimes" / "judge"


def find_judge(home: Path | None = None) -> JudgeRuntime | None:
    """The built judge for the current lockfile, or None."""
    digest = lock_hash()
    venv = _parent(home) / digest
    marker = venv / MARKER_NAME
    if not marker.is_file() or not (venv / "bin" / "python").exists():
        return None
    meta = json.loads(marker.read_text())
    return JudgeRuntime(
        venv_path=venv,
        python=venv / "bin" / "python",
        interpreter_prefix=Path(meta["interpreter_prefix"]),
        files_dir=files_dir(),
        lock_hash=digest,
    )


def build_judge(
    home: Path | None = None,
    on_output: OutputCallback = lambda _line: None,
    *,
    base_python: Path | None = None,
) -> JudgeRuntime:
    """Build (or reuse) the judge venv; atomic (a temp dir renamed into place under a lock)."""
    digest = lock_hash()
    parent = _parent(home)
    with build_lock(parent):
        existing = find_judge(home)
        if existing is not None:
            return existing
        marker = build_venv(
            parent / digest,
            files_dir() / "requirements.lock",
            what="judge's",
            verify=["-I", "-c", "import pytest"],
            verify_what="the import check of pytest",
            marker_name=MARKER_NAME,
            on_output=on_output,
            base_python=base_python,
        )
    built = find_judge(home)
    assert built is not None
    on_output(f"judge runtime {digest} built in {marker['build_seconds']} s")
    return built
