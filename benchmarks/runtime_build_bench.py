"""OpenHands runtime build: uv (cold cache, warm cache, unchanged) vs the venv's own pip.

Every variant builds the same hash-pinned lock into a scratch ``SYNTHORG_HOME`` with
``synthorg.runtime.build_runtime`` (the code `synthorg runtime build openhands` runs):

- ``uv cold``: an empty uv cache (``UV_CACHE_DIR`` in the scratch dir): everything downloaded;
- ``uv warm``: the same cache again, into a fresh home (what a rebuild after a lock change of a
  few packages, or a second machine user, pays);
- ``unchanged``: the home already holds the build (what `bootstrap.sh --tests` pays each time);
- ``unchanged CLI``: the same, as the whole ``synthorg runtime build openhands`` command
  (interpreter start, imports and the sandbox view's check included);
- ``pip`` (the baseline, ~10 min here; ``--no-pip`` skips it): the previous builder, the
  new venv's own pip with ``--require-hashes --no-deps`` and an empty pip cache.

    uv run python benchmarks/runtime_build_bench.py [--no-pip]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from synthorg.runtime import build_runtime
from synthorg.runtime.files import lockfile_path
from synthorg.runtime.venvbuild import find_base_python


def timed_build(home: Path, cache: Path) -> float:
    """Build into ``home``; print how long each phase ran (from the progress lines)."""
    os.environ["UV_CACHE_DIR"] = str(cache)
    marks: list[tuple[str, float]] = []

    def on_output(line: str) -> None:
        phase = line[1 : line.find("]")] if line.startswith("[") else ""
        if phase and (not marks or marks[-1][0] != phase):
            marks.append((phase, time.monotonic()))

    started = time.monotonic()
    build_runtime(home, on_output)
    ended = time.monotonic()
    spans = zip(marks, [*(at for _, at in marks[1:]), ended], strict=True)
    if marks:
        print("  " + ", ".join(f"{name} {end - at:.1f} s" for (name, at), end in spans))
    return ended - started


def timed_cli(home: Path, cache: Path) -> float:
    env = {**os.environ, "SYNTHORG_HOME": str(home), "UV_CACHE_DIR": str(cache)}
    started = time.monotonic()
    subprocess.run(
        [str(Path(sys.executable).with_name("synthorg")), "runtime", "build", "openhands"],
        check=True, env=env, capture_output=True,
    )  # fmt: skip
    return time.monotonic() - started


def timed_pip(scratch: Path) -> float:
    venv = scratch / "pip-venv"
    env = {**os.environ, "PIP_CACHE_DIR": str(scratch / "pip-cache")}
    started = time.monotonic()
    subprocess.run([str(find_base_python()), "-m", "venv", str(venv)], check=True, env=env)
    subprocess.run(
        [
            *(str(venv / "bin" / "python"), "-m", "pip", "install", "-q"),
            *("--disable-pip-version-check", "--require-hashes", "--no-deps"),
            *("-r", str(lockfile_path())),
        ],
        check=True,
        env=env,
    )
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-pip", action="store_true", help="skip the pip baseline (~10 min)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rt-bench-") as tmp:
        scratch = Path(tmp)
        cache = scratch / "uv-cache"
        rows = {
            "uv cold": timed_build(scratch / "home-cold", cache),
            "uv warm": timed_build(scratch / "home-warm", cache),
            "unchanged": timed_build(scratch / "home-warm", cache),
            "unchanged CLI": timed_cli(scratch / "home-warm", cache),
        }
        if not args.no_pip:
            rows["pip (previous)"] = timed_pip(scratch)
    base = rows.get("pip (previous)")
    for name, seconds in rows.items():
        ratio = f"  {seconds / base:.2f}x pip" if base else ""
        print(f"{name:>15}: {seconds:7.1f} s{ratio}")
    if base is None:
        print(f"{'':>15}  (pip baseline skipped: no ratio)", file=sys.stderr)


if __name__ == "__main__":
    main()
