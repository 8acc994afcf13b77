"""Red team: the OpenHands runtime's terminal opens only the allowed socket families.

The agent runs the probe of ``tests/sandbox/socket_probe.py`` through the SDK's own terminal
tool (real runtime venv, SDK, tmux, service and bwrap sandbox; only the model is scripted),
so the runtime's own needs (tmux, python, the forwarders) are the positive control.
"""

from __future__ import annotations

import base64
import json
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
from tests.sandbox import socket_probe

from .conftest import Booter
from .e2e_support import make_task

pytestmark = [pytest.mark.openhands, pytest.mark.bwrap, pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = "tests.engine.openhands.test_redteam_sockets:run_probe"
_ENCODED = base64.b64encode(socket_probe.SOURCE.encode()).decode()
PROBE = f"echo {_ENCODED} | base64 -d | python3 > sockets.json"


def run_probe(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Write the probe's report into the worktree (the gate commits it), then finish."""
    if not [s for s in steps_of(messages) if s.name == "terminal" and s.result is not None]:
        return call("terminal", "Probing sockets.", command=PROBE)
    return call("finish", message="done")


async def test_an_openhands_runs_terminal_opens_only_the_allowed_families(
    booted: Booter, demo_repo: Path, openhands_runtime: OpenHandsRuntime
) -> None:
    async with booted(SCRIPT) as components:
        record = await components.service.create(make_task(demo_repo), RunOptions(loop="openhands"))
        result = await components.service.run(record.id)
    assert result.termination_reason is TerminationReason.COMPLETED, result.error
    assert result.branch is not None
    shown = ["git", "-C", str(demo_repo), "show", f"{result.branch}:sockets.json"]
    socket_probe.check(json.loads(subprocess.run(shown, capture_output=True, check=True).stdout))
