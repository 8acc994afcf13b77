"""Red team: inside a real OpenHands-loop run, /proc/self/mountinfo names no host location.

The agent reads its mount table through the SDK's own terminal tool (the real runtime venv,
SDK, service and bwrap sandbox; only the model is scripted). Neither the data dir, the
conversation id, the state dir, the runtime venv, the entrypoint's directory, the host home,
the venv's base interpreter (/root/.pyenv/...) nor the backend's staging dir may appear: that
map is what the resume and ``.git`` escapes of issue 12 were built from.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from synthorg.domain import TerminationReason
from synthorg.engine.native.scripts import steps_of
from synthorg.engine.openhands.scripts import Tools, call
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage
from synthorg.runtime import OpenHandsRuntime
from synthorg.service.options import RunOptions

from .conftest import Booter
from .e2e_support import make_task

pytestmark = [pytest.mark.openhands, pytest.mark.bwrap, pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = "tests.engine.openhands.test_redteam_mountinfo:read_mountinfo"
PROBE = (
    "cat /proc/self/mountinfo /proc/1/mountinfo > mountinfo.txt; "
    "tr '\\0' ' ' </proc/1/cmdline >> mountinfo.txt"
)


def read_mountinfo(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Copy the mount tables into the worktree (the gate commits them), then finish."""
    if not [s for s in steps_of(messages) if s.name == "terminal" and s.result is not None]:
        return call("terminal", "Looking around.", command=PROBE)
    return call("finish", message="done")


async def test_mountinfo_inside_an_openhands_run_names_no_host_location(
    booted: Booter, demo_repo: Path, home: Path, openhands_runtime: OpenHandsRuntime
) -> None:
    async with booted(SCRIPT) as components:
        record = await components.service.create(make_task(demo_repo), RunOptions(loop="openhands"))
        result = await components.service.run(record.id)
    assert result.termination_reason is TerminationReason.COMPLETED, result.error
    assert result.branch is not None
    seen = subprocess.run(
        ["git", "show", f"{result.branch}:mountinfo.txt"],
        cwd=demo_repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert " /state " in seen and " /workspace " in seen, seen  # it is the sandbox's table
    secrets = {
        "data dir": str(home),
        "data dir (resolved)": str(home.resolve()),
        "conversation": record.id,
        "runtime venv": str(openhands_runtime.venv_path),
        "runtime venv (resolved)": str(openhands_runtime.venv_path.resolve()),
        "runtimes dir": "runtimes/openhands",
        "entrypoint dir": str(openhands_runtime.entrypoint.parent),
        "state dir": "/openhands/",
        "host home": f"{Path.home()}/",
        "base interpreter": str(openhands_runtime.interpreter_prefix),
        "base interpreter (resolved)": str(openhands_runtime.interpreter_prefix.resolve()),
        "pyenv": "/.pyenv/",
        "staging dir": "/tmp/synthorg-sandbox-",
    }
    leaks = {name: value for name, value in secrets.items() if value in seen}
    assert not leaks, (leaks, seen)
