"""The `--confirm` prompt shows the complete action, escaped: the whole padded command, every
line of a file it creates, and bidi characters flagged and escaped (a real run at a pty)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

from synthorg.service.demo import create_demo_repo
from tests.cli import scripts
from tests.cli.cli_support import SYNTHORG, cli_env, scripted_config

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def _until(fd: int, marker: str, seen: list[str], deadline: float) -> str:
    """Read the pty until ``marker`` has appeared once more than before (bounded)."""
    wanted = "".join(seen).count(marker) + 1
    while "".join(seen).count(marker) < wanted:
        left = deadline - time.monotonic()
        assert left > 0, "".join(seen)[-3000:]
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            seen.append(os.read(fd, 65536).decode(errors="replace"))
    return "".join(seen)


def test_the_prompt_shows_the_whole_action_escaped(tmp_path: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    config = scripted_config(tmp_path / "c.toml", "tests.cli.scripts:approver_must_see")
    home = tmp_path / "home"
    argv = [*SYNTHORG, "run", "go", "--repo", str(repo), "-c", str(config), "--confirm", "always"]
    primary, secondary = pty.openpty()
    run = subprocess.Popen(
        argv, env=cli_env(home), stdin=secondary, stdout=secondary, stderr=secondary
    )
    os.close(secondary)
    seen: list[str] = []
    prompts = []
    try:
        for _ in range(3):
            out = _until(primary, "[y/N]", seen, time.monotonic() + 180)
            prompts.append(re.sub(r"\x1b\[[0-9;]*m", "", out[out.rfind("approve ") :]))
            os.write(primary, b"y\n")
        assert run.wait(timeout=120) == 0, "".join(seen)[-3000:]
    finally:
        if run.poll() is None:
            run.kill()
        os.close(primary)
    padded, bidi, create = prompts
    assert scripts.PADDED in padded.replace("\r\n", "\n"), padded  # every space and the tail
    assert "\u202e" not in bidi and "\u2066" not in bidi
    assert "#\\u202e; echo bidi-tail } \\u2066rm-asdf; {\\u2069" in bidi, bidi
    assert "3 invisible, bidirectional or control characters" in bidi, bidi
    assert "create conftest.py" in create
    for line in scripts.CONFTEST.splitlines():
        assert f"│ {line}" in create, create
