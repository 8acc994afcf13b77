"""Running the real `synthorg` command in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from tests.sandbox.helpers import sandboxes_in

SYNTHORG = [sys.executable, "-m", "synthorg.cli.app"]
ROOT = Path(__file__).resolve().parents[2]
RAW_CONTROL = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))]
"""Characters that must never reach the terminal from untrusted text (newline and tab may)."""


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: its own data dir, this checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(SYNTHORG_HOME=str(home), PYTHONPATH=str(ROOT), COLUMNS="200", **extra)
    return env


def scripted_config(path: Path, script: str, *, latency_ms: int = 0) -> Path:
    """A config whose default model is served by the scripted ``script`` ('module:attr')."""
    path.write_text(
        '[[gateway.providers]]\nname = "scripted"\nkind = "scripted"\nmodels = ["m"]\n'
        f'script = "{script}"\nlatency_ms = {latency_ms}\n[run]\nmodel = "m"\n'
    )
    return path


def sandboxes_of(home: Path) -> list[psutil.Process]:
    """bwrap processes of this data dir (by host-side cwd: bwrap's argv names no host path)."""
    return sandboxes_in(home)


def started_until(
    argv: list[str], env: dict[str, str], line: str
) -> tuple[subprocess.Popen[str], list[str]]:
    """A command started with its output piped, read until a line that is exactly ``line``
    (stripped) or its end: the process and the lines read so far."""
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines: list[str] = []
    for read in proc.stdout:
        lines.append(read)
        if read.strip() == line:
            break
    return proc, lines
