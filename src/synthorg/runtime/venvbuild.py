"""Build a hash-pinned venv atomically: the one procedure the OpenHands runtime and the judge use.

Under ``parent/<digest>``: a lock for the build, leftovers of a dead build removed, a venv made
from a base CPython 3.12 (never a venv's python, so it inherits nothing), the lockfile installed
with ``--require-hashes`` by uv, an import check, a marker file written last, and the temp dir
renamed into place. A directory without its marker is never used.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from synthorg.errors import ConfigError
from synthorg.runtime.installer import (
    OutputCallback,
    Step,
    find_uv,
    install_step,
    run_step,
    venv_step,
)

RUNTIME_PYTHON = (3, 12)
"""The lockfiles are compiled for CPython 3.12; a runtime venv must use exactly that."""


def find_base_python(explicit: Path | None = None) -> Path:
    """A CPython 3.12 to create a venv from (never a venv's python, to inherit nothing)."""
    if explicit is not None:
        return explicit
    if sys.version_info[:2] == RUNTIME_PYTHON:
        # Inside the main venv, sys.executable is that venv's python; the base one keeps
        # the new venv independent of the main venv's site-packages.
        return Path(getattr(sys, "_base_executable", sys.executable))
    found = shutil.which("python3.12")
    if found is None:
        raise ConfigError(
            "a SynthOrg runtime needs CPython 3.12 but none was found on PATH; "
            "install it (e.g. `uv python install 3.12`) and pass its path"
        )
    return Path(found)


def clean_env() -> dict[str, str]:
    """This process's environment without what would leak the main venv into a runtime's."""
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


def python_says(python: Path, code: str) -> str:
    """What ``python -c code`` prints (stripped), run with the clean environment."""
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True, env=clean_env()
    ).stdout.strip()


def check_version(python: Path, what: str) -> None:
    """ConfigError unless ``python`` is the CPython the lockfiles are for."""
    try:
        out = python_says(python, "import sys; print('%d.%d' % sys.version_info[:2])")
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ConfigError(f"cannot run {python} to check its version: {exc}") from exc
    want = "{}.{}".format(*RUNTIME_PYTHON)
    if out != want:
        raise ConfigError(
            f"{python} is Python {out}; the {what} lockfile is for Python {want}. "
            "Point the build at a CPython 3.12 interpreter."
        )


@contextmanager
def build_lock(parent: Path) -> Iterator[None]:
    """Hold ``parent``'s build lock (one build per kind of runtime at a time)."""
    parent.mkdir(parents=True, exist_ok=True)
    with (parent / ".build.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_venv(
    final: Path,
    lockfile: Path,
    *,
    what: str,
    verify: Sequence[str],
    verify_what: str,
    marker_name: str,
    on_output: OutputCallback,
    base_python: Path | None = None,
) -> dict[str, Any]:
    """Build ``final`` (a ``<digest>`` dir) from ``lockfile``; the caller holds ``build_lock``
    of its parent. ``what`` names the lockfile in messages ("OpenHands", "judge's");
    ``verify``: the interpreter's arguments of the import check. The marker written (and
    returned) says the digest, the interpreter prefix and the build time."""
    parent = final.parent
    for stale in parent.glob(".building-*"):  # holding the lock: a dead build's
        shutil.rmtree(stale, ignore_errors=True)
    python = find_base_python(base_python)
    check_version(python, what)
    started = time.monotonic()
    uv = find_uv()
    tmp = Path(tempfile.mkdtemp(prefix=f".building-{final.name}-", dir=parent))
    try:
        env = clean_env()
        run_step(venv_step(uv, python, tmp), env, on_output)
        venv_python = tmp / "bin" / "python"
        step = install_step(uv, lockfile, venv_python)
        run_step(Step(step.argv, step.phase, f"install of the {what} lockfile"), env, on_output)
        run_step(
            Step([str(venv_python), *verify], "verify", verify_what),
            env,
            on_output,
        )
        marker = {
            "lock_hash": final.name,
            "interpreter_prefix": python_says(venv_python, "import sys; print(sys.base_prefix)"),
            "base_python": str(python),
            "build_seconds": round(time.monotonic() - started, 1),
            "built_at": time.time(),
        }
        (tmp / marker_name).write_text(json.dumps(marker, indent=2))
        if final.exists():  # a build that died after its rename, or a forced rebuild
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return marker
