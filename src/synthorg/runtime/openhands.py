"""Locate and build the isolated OpenHands runtime venv under ``SYNTHORG_HOME``."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from synthorg.errors import BoundaryError, ConfigError
from synthorg.paths import synthorg_home
from synthorg.runtime.files import entrypoint_path, lockfile_path
from synthorg.runtime.installer import (
    OutputCallback,
    Step,
    find_uv,
    install_step,
    run_step,
    venv_step,
)

MARKER_NAME = ".synthorg-runtime.json"
"""Written inside a runtime dir only after a successful build: its presence means 'built'."""

RUNTIME_PYTHON = (3, 12)
"""The lockfile is compiled for CPython 3.12; the runtime venv must use exactly that."""


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


def find_base_python(explicit: Path | None = None) -> Path:
    """A CPython 3.12 to create the venv from (never a venv's python, to inherit nothing)."""
    if explicit is not None:
        return explicit
    if sys.version_info[:2] == RUNTIME_PYTHON:
        # Inside the main venv, sys.executable is that venv's python; the base one keeps
        # the new venv independent of the main venv's site-packages.
        return Path(getattr(sys, "_base_executable", sys.executable))
    found = shutil.which("python3.12")
    if found is None:
        raise ConfigError(
            "the OpenHands runtime needs CPython 3.12 but none was found on PATH; "
            "install it (e.g. `uv python install 3.12`) and pass its path"
        )
    return Path(found)


def _clean_env() -> dict[str, str]:
    # Nothing of the main venv may leak into the runtime's pip or python.
    drop = {
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PIP_PYTHON",
        "UV_PYTHON",
        "UV_PROJECT_ENVIRONMENT",
    }
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def _python_says(python: Path, code: str) -> str:
    """What ``python -c code`` prints (stripped), run with the runtime's clean environment."""
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True, env=_clean_env()
    ).stdout.strip()


@contextmanager
def _build_lock(parent: Path) -> Iterator[None]:
    parent.mkdir(parents=True, exist_ok=True)
    with (parent / ".build.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
    with _build_lock(parent):
        existing = _runtime_from_dir(final, digest)
        if existing is not None and not force:
            on_output(f"OpenHands runtime {digest} already built at {final}")
            return existing
        # Holding the lock, any leftover temp dir is from a build that died.
        for stale in parent.glob(".building-*"):
            shutil.rmtree(stale, ignore_errors=True)
        python = find_base_python(base_python)
        _check_version(python)
        started = time.monotonic()
        uv = find_uv()
        tmp = Path(tempfile.mkdtemp(prefix=f".building-{digest}-", dir=parent))
        try:
            env = _clean_env()
            run_step(venv_step(uv, python, tmp), env, on_output)
            venv_python = tmp / "bin" / "python"
            run_step(install_step(uv, lockfile, venv_python), env, on_output)
            verify = [str(venv_python), "-c", "import openhands.sdk, openhands.tools"]
            run_step(Step(verify, "verify", "the import check of openhands.sdk"), env, on_output)
            prefix = _python_says(venv_python, "import sys; print(sys.base_prefix)")
            marker = {
                "lock_hash": digest,
                "interpreter_prefix": prefix,
                "base_python": str(python),
                "build_seconds": round(time.monotonic() - started, 1),
                "built_at": time.time(),
            }
            (tmp / MARKER_NAME).write_text(json.dumps(marker, indent=2))
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    on_output(f"OpenHands runtime {digest} built at {final} in {marker['build_seconds']} s")
    built = _runtime_from_dir(final, digest)
    assert built is not None
    return built


def _check_version(python: Path) -> None:
    try:
        out = _python_says(python, "import sys; print('%d.%d' % sys.version_info[:2])")
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ConfigError(f"cannot run {python} to check its version: {exc}") from exc
    want = "{}.{}".format(*RUNTIME_PYTHON)
    if out != want:
        raise ConfigError(
            f"{python} is Python {out}; the OpenHands lockfile is for Python {want}. "
            "Point the build at a CPython 3.12 interpreter."
        )
