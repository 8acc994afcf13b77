"""run_task.py WORKSPACE: the agent's terminal starts before the spec arrives, and is the one
the agent's commands run in only when the spec asks for it (synthorg_oh_terminal).

The real SDK and gateway, not sandboxed (the pooled sandbox's hand-over is in
tests/engine/openhands/test_pool_e2e.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from synthorg.gateway.scripted import ScriptedTurn
from synthorg.runtime import OpenHandsRuntime

from .entrypoint_driver import WAIT_S, EntrypointRun
from .gateway_harness import GatewayThread, RecordingScript
from .test_entrypoint import CONVERSATION, RISKY, make_spec, two_risky_calls

pytestmark = [pytest.mark.openhands, pytest.mark.slow]

PROBE = "echo pid=$$ in=$(pwd); cat late.txt"


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test() -> Iterator[None]:
    yield
    EntrypointRun.kill_all()


def _children(pid: int) -> dict[int, str]:
    """pid -> name of pid's live children."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # it exited while we looked
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :]
        if int(rest.split()[1]) == pid:
            found[int(stat.parent.name)] = name
    return found


def wait_for_shell(run: EntrypointRun) -> int:
    """The pid of the bash the entrypoint started (a bound on a hung import, not a target)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        shells = [pid for pid, name in _children(run.proc.pid).items() if name == "bash"]
        if shells:
            return shells[0]
        assert run.proc.poll() is None, "the entrypoint exited without a spec"
        time.sleep(0.05)  # polling /proc: there is nothing to wait on
    raise AssertionError(f"no shell under the entrypoint within {WAIT_S}s")


def probe(
    runtime: OpenHandsRuntime, tmp_path: Path, launched_at: Path, late: str
) -> tuple[int, str]:
    """Start the entrypoint with ``launched_at``, wait for its shell, write late.txt into the
    spec's workspace (as a pool's hand-over fills it after the shell started), send the spec;
    (the early shell's pid, what the agent's PROBE printed)."""
    script = RecordingScript(
        [ScriptedTurn.call("terminal", command=PROBE), ScriptedTurn.call("finish", message="ok")]
    )
    with GatewayThread(tmp_path, script) as gateway:
        _, token = gateway.open_run(CONVERSATION)
        run = EntrypointRun(runtime, None, tmp_path / "stderr", args=[str(launched_at)])
        early = wait_for_shell(run)
        spec = make_spec(tmp_path, gateway, token)
        (Path(spec["workspace_path"]) / "late.txt").write_text(late)
        run.send(spec)
        run.wait_for("finished", summary="ok")
        assert run.finish() == 0
    (action,) = [a for a in run.of_kind("action") if a["tool_name"] == "terminal"]
    (seen,) = [o for o in run.of_kind("observation") if o["action_id"] == action["id"]]
    return early, str(seen["content"])


def test_the_shell_started_before_the_spec_runs_the_agents_commands(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    workspace = tmp_path / "worktree"  # the spec's (make_spec)
    workspace.mkdir()
    early, output = probe(openhands_runtime, tmp_path, workspace, "filled after the shell\n")
    assert f"pid={early} in={workspace}\nfilled after the shell\n" in output, output


def test_a_spec_for_another_workspace_gets_a_shell_of_its_own(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    early, output = probe(openhands_runtime, tmp_path, elsewhere, "the spec's workspace\n")
    assert f"in={tmp_path / 'worktree'}\nthe spec's workspace\n" in output, output
    assert f"pid={early} " not in output
    assert not Path(f"/proc/{early}").exists()  # the unused shell was closed, not left behind


def test_a_conversation_started_with_the_early_shell_resumes_without_it(
    openhands_runtime: OpenHandsRuntime, tmp_path: Path
) -> None:
    """The agent's terminal spec carries no params when adopted: a resume checks tool names,
    so either start resumes the other's conversation."""
    workspace = tmp_path / "worktree"
    workspace.mkdir()
    script = RecordingScript([two_risky_calls(), ScriptedTurn.call("finish", message="resumed")])
    with GatewayThread(tmp_path, script) as gateway:
        _, token = gateway.open_run(CONVERSATION)
        first = EntrypointRun(
            openhands_runtime,
            make_spec(tmp_path, gateway, token, **RISKY),
            tmp_path / "stderr-1",
            args=[str(workspace)],
        )
        first.wait_for("confirmation_request")
        first.kill()
        _, token = gateway.open_run(CONVERSATION)
        second = EntrypointRun(
            openhands_runtime, make_spec(tmp_path, gateway, token, **RISKY), tmp_path / "stderr-2"
        )
        second.wait_for("status", summary="resumed")
        second.wait_for("finished", summary="resumed")
        assert second.finish() == 0
    assert "touch approved.txt" in script.history_text(1)
