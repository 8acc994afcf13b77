"""A baseline revision's source tree, for benchmarks that measure against it in the same run."""

from __future__ import annotations

import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def extract_src(rev: str, into: Path) -> Path:
    """``src/`` of ``rev`` (from this repository's git) extracted under ``into``, with the
    OpenHands runtime files beside it when ``rev`` has them (a source checkout's serve looks
    for them there at start-up)."""
    paths = ["src"]
    runtimes = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, "runtimes/openhands"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if runtimes.strip():
        paths.append("runtimes/openhands")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, *paths],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def bytecode_env(env: dict[str, str], cache: Path, *, enabled: bool = True) -> dict[str, str]:
    """``env`` for a measured process that reads and writes compiled bytecode under ``cache``.

    An installed package runs from bytecode (pip compiles at install; Python writes it on the
    first import). A shell with ``PYTHONDONTWRITEBYTECODE`` set (this machine's) would make
    every fresh process compile every module it imports: up to twice the start-up CPU. A
    separate cache prefix keeps ``src/`` and the venv clean; run each variant once, not
    counted, to fill it. ``enabled=False`` measures the no-bytecode case on purpose.
    """
    out = dict(env)
    if enabled:
        out.pop("PYTHONDONTWRITEBYTECODE", None)
        out["PYTHONPYCACHEPREFIX"] = str(cache)
    else:  # an empty prefix that is never written: __pycache__ dirs in the tree are not read
        out["PYTHONDONTWRITEBYTECODE"] = "1"
        out["PYTHONPYCACHEPREFIX"] = f"{cache}-never-written"
    return out
