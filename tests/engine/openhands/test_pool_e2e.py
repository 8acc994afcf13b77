"""A pooled sandbox serves one real OpenHands run (the SDK imported and the agent's shell
started before the run came: the shell sees the handed-over worktree), and the run's mount
table names no host location, as a cold-started one's does not."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from synthorg.domain import TerminationReason
from synthorg.engine.native.scripts import steps_of
from synthorg.engine.openhands.scripts import Tools, call
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage
from synthorg.runtime import OpenHandsRuntime
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.options import RunOptions

from .e2e_support import make_settings, make_task
from .test_redteam_mountinfo import PROBE

pytestmark = [pytest.mark.openhands, pytest.mark.bwrap, pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = "tests.engine.openhands.test_pool_e2e:probe"
SHELL = "{ pwd; ls; cut -d' ' -f22 /proc/$$/stat; } > shell.txt"
"""Where the agent's shell is, what it sees there, and when it started (clock ticks)."""


def probe(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """The mount tables and the shell's view into the worktree (the gate commits them)."""
    if not [s for s in steps_of(messages) if s.name == "terminal" and s.result is not None]:
        return call("terminal", "Looking around.", command=f"{PROBE}; {SHELL}")
    return call("finish", message="done")


def _descendants(pid: int) -> dict[int, tuple[str, str]]:
    """pid -> (name, start time in clock ticks) of every live process under pid."""
    parents: dict[int, int] = {}
    seen: dict[int, tuple[str, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # it exited while we looked
            continue
        rest = text[text.rindex(")") + 2 :].split()
        parents[int(stat.parent.name)] = int(rest[1])
        seen[int(stat.parent.name)] = (text[text.index("(") + 1 : text.rindex(")")], rest[19])
    found, frontier = {}, {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found.update({child: seen[child] for child in frontier})
    return found


def slot_shell_start(pid: int) -> str:
    """The start time of the bash the slot's entrypoint started while waiting for its run."""
    deadline = time.monotonic() + 600  # a bound on a hung import under load, not a target
    while time.monotonic() < deadline:
        shells = [start for name, start in _descendants(pid).values() if name == "bash"]
        if shells:
            return shells[0]
        time.sleep(0.1)  # polling /proc: there is nothing to wait on
    raise AssertionError("the pooled sandbox started no shell")


async def test_a_pooled_sandbox_serves_one_openhands_run(
    demo_repo: Path, home: Path, openhands_runtime: OpenHandsRuntime
) -> None:
    async with boot(
        make_settings(home, SCRIPT),
        registry=default_registry(),
        provisioner=default_provisioner,
        openhands_pool="kept",
    ) as components:
        pool = components.sandbox_pool
        assert pool is not None and pool.size == 1  # the default
        await pool.settle()
        (slot,) = [s for slots in pool._idle.values() for s in slots]
        shell_started = slot_shell_start(slot.process.pid)
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions(loop="openhands"))
        result = await service.run(record.id)
        assert pool.served == 1
        assert slot.process.exit is not None  # used once, then torn down
        await pool.settle()
        (replacement,) = [s for slots in pool._idle.values() for s in slots]
        assert replacement.process.pid != slot.process.pid and replacement.process.exit is None
    assert result.termination_reason is TerminationReason.COMPLETED, result.error
    assert result.branch is not None
    git = ["git", "-C", str(demo_repo), "show", f"{result.branch}:mountinfo.txt"]
    seen = subprocess.run(git, capture_output=True, text=True, check=True).stdout
    assert " /state " in seen and " /workspace " in seen and "/dev/loop" in seen, seen
    for secret in (str(home), record.id, "/openhands/", "/pool/", str(openhands_runtime.venv_path)):
        assert secret not in seen, (secret, seen)
    assert not (home / "openhands" / record.id).with_name(f"{record.id}.recovered").exists()
    assert any((home / "openhands" / record.id).rglob("base_state.json"))  # state came back
    git = ["git", "-C", str(demo_repo), "show", f"{result.branch}:shell.txt"]
    where, *listed, started = subprocess.run(
        git, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    # The agent's commands ran in the shell the slot started before the run existed, in the
    # worktree the hand-over filled in after that.
    assert (where, started) == ("/workspace", shell_started), (where, started, shell_started)
    assert "calc.py" in listed and "test_calc.py" in listed, listed
