"""`synthorg run` hands its run to this data dir's running `synthorg serve` (its local socket),
follows it as it follows its own, and runs in its own process when no trusted serve answers."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from synthorg.localsock import serve_socket
from synthorg.runtime import OpenHandsRuntime
from synthorg.service.demo import create_demo_repo
from tests.cli.cli_support import SYNTHORG, cli_env, sandboxes_of, started_until
from tests.cli.serving import serving
from tests.engine.openhands.e2e_support import make_home
from tests.runtime.conftest import openhands_runtime

__all__ = ["openhands_runtime"]

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

EMBEDDED = "engine: embedded (this process)"


def _setup(tmp_path: Path, *, latency_ms: int = 0, roots: bool = True) -> tuple[Path, Path, Path]:
    home = tmp_path / "home"
    repo = create_demo_repo(tmp_path / "calc")
    config = tmp_path / "synthorg.toml"
    config.write_text(
        '[[gateway.providers]]\nname = "scripted"\nkind = "scripted"\nmodels = ["m"]\n'
        f'script = "tests.service.scripts:progress_five"\nlatency_ms = {latency_ms}\n'
        f'[run]\nmodel = "m"\nshutdown_grace_s = 0.5\n'
        + (f"[server]\nrepository_roots = [{json.dumps(str(tmp_path))}]\n" if roots else "")
    )
    return home, repo, config


def _run(home: Path, repo: Path, config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SYNTHORG, "run", "write five lines", "--repo", str(repo), "-c", str(config), *extra],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=240,
    )


def _conversation(output: str) -> str:
    found = re.search(r"conversation (conv-[0-9a-f]+)", output)
    assert found, output
    return found.group(1)


def _on_serve(home: Path, conversation_id: str) -> dict[str, object]:
    """The conversation as the serve's local socket reports it."""
    transport = httpx.HTTPTransport(uds=str(serve_socket(home)))
    with httpx.Client(transport=transport, base_url="http://serve", timeout=30) as client:
        reply = client.get(f"/v1/conversations/{conversation_id}")
    assert reply.status_code == 200, reply.text
    body: dict[str, object] = reply.json()
    return body


def test_the_run_is_executed_by_the_running_serve(tmp_path: Path) -> None:
    home, repo, config = _setup(tmp_path)
    with serving(home, config) as serve:
        done = _run(home, repo, config)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        # The pid the kernel names as the socket's peer (SO_PEERCRED), not one the serve says.
        assert f"engine: via serve pid {serve.proc.pid} ({serve_socket(home)})" in output
        assert re.search(r"termination\s+.\s*completed", output), output
        assert "▶ terminal" in output and "confirmed-5" in output  # the live events
        conversation = _conversation(output)
        # The serve process created it and its gate landed the commit.
        serve.wait_for('"CONVERSATION_CREATED"', conversation)
        serve.wait_for('"COMMIT_GATE"', conversation)
        shown = _on_serve(home, conversation)
        assert shown["status"] == "finished" and not shown["secrets"]  # secrets stay there

        # --resume --message go through the serve too.
        resumed = subprocess.run(
            [*SYNTHORG, "run", "--resume", conversation, "--message", "again", "-c", str(config)],
            env=cli_env(home),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert f"via serve pid {serve.proc.pid}" in resumed.stdout, resumed.stdout
        assert "user: again" in resumed.stdout, resumed.stdout

        # --engine embedded keeps the run in this process.
        here = _run(home, repo, config, "--engine", "embedded")
        assert here.returncode == 0, here.stdout + here.stderr
        assert EMBEDDED in here.stdout
        assert _conversation(here.stdout) not in serve.log()


def test_ctrl_c_cancels_the_run_on_the_serve(tmp_path: Path) -> None:
    home, repo, config = _setup(tmp_path, latency_ms=200)
    with serving(home, config) as serve:
        run, lines = started_until(
            [*SYNTHORG, "run", "write five lines", "--repo", str(repo), "-c", str(config)],
            cli_env(home),
            "│ confirmed-1",  # the observation, not the command echoing it
        )
        assert sandboxes_of(home), "the serve should be running it inside a sandbox"
        run.send_signal(signal.SIGINT)
        rest, _ = run.communicate(timeout=120)
        output = "".join(lines) + rest
        assert run.returncode == 1, output
        assert f"via serve pid {serve.proc.pid}" in output
        assert "cancelling" in output and re.search(r"termination\s+.\s*cancelled", output)
        conversation = _conversation(output)
        assert _on_serve(home, conversation)["status"] == "cancelled"
        assert serve.proc.poll() is None, "the serve goes on serving"
        assert not sandboxes_of(home)


def test_a_serve_stopped_mid_run_ends_it_resumable_and_the_terminal_shows_how(
    tmp_path: Path,
) -> None:
    home, repo, config = _setup(tmp_path, latency_ms=200)
    with serving(home, config) as serve:
        run, lines = started_until(
            [*SYNTHORG, "run", "write five lines", "--repo", str(repo), "-c", str(config)],
            cli_env(home),
            "│ confirmed-1",
        )
        serve.proc.send_signal(signal.SIGTERM)  # what systemd does to stop it
        rest, _ = run.communicate(timeout=120)
        output = "".join(lines) + rest
        assert serve.proc.wait(60) in (0, -signal.SIGTERM)
    # The serve lets the terminal read the end before it goes: the summary, not a lost server.
    assert run.returncode == 1, output
    assert re.search(r"termination\s+.\s*shutdown", output), output
    assert re.search(r"status\s+.\s*paused", output) and "lost serve" not in output, output


def test_the_serves_repository_roots_do_not_bind_the_local_operator(tmp_path: Path) -> None:
    """A serve with no roots (its API clients may name no repository) still runs what the
    terminal names, as the terminal's own process would; its data dir stays refused."""
    home, repo, config = _setup(tmp_path, roots=False)
    with serving(home, config) as serve:
        done = _run(home, repo, config)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        assert f"engine: via serve pid {serve.proc.pid}" in output
        assert "running in this process" not in output

        inside = home / "worktrees"
        refused = _run(home, inside, config, "--engine", "serve")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "overlaps SynthOrg's data dir" in refused.stdout + refused.stderr
        assert not re.search(r"conversation conv-", refused.stdout), refused.stdout


def test_a_stale_socket_falls_back_to_this_process_and_a_new_serve_replaces_it(
    tmp_path: Path,
) -> None:
    home, repo, config = _setup(tmp_path)
    with serving(home, config) as serve:
        serve.proc.send_signal(signal.SIGKILL)
        serve.proc.wait(30)
    assert serve_socket(home).is_socket(), "a killed serve leaves its socket file behind"

    done = _run(home, repo, config)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"no serve answers on {serve_socket(home)}" in done.stdout
    assert "running in this process" in done.stdout and EMBEDDED in done.stdout

    strict = _run(home, repo, config, "--engine", "serve")
    assert strict.returncode == 2 and "no serve answers" in strict.stderr, strict.stderr

    with serving(home, config) as again:
        handed = _run(home, repo, config)
        assert handed.returncode == 0, handed.stdout + handed.stderr
        assert f"via serve pid {again.proc.pid}" in handed.stdout


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to plant another uid's socket")
@pytest.mark.parametrize("planted", ["open-directory", "other-uid"])
def test_a_planted_socket_is_refused(tmp_path: Path, planted: str) -> None:
    home, repo, config = _setup(tmp_path)
    path = serve_socket(home)
    path.parent.mkdir(parents=True, mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(8)  # it would accept: only the checks before connecting refuse it
        if planted == "open-directory":
            path.parent.chmod(0o777)
            why = "others may write in"
        else:
            os.chown(path, 999, 999)
            why = "it belongs to uid 999"
        done = _run(home, repo, config)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"refusing the serve socket {path}" in done.stdout and why in done.stdout
        assert EMBEDDED in done.stdout
        if planted == "open-directory":
            # The embedded run made its own run/ private again (localsock.private_dir narrows
            # a directory of this uid to 0700); open it once more for the strict run.
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
            path.parent.chmod(0o777)
        strict = _run(home, repo, config, "--engine", "serve")
        assert strict.returncode == 2 and "refusing the serve socket" in strict.stderr


@pytest.mark.openhands
@pytest.mark.timeout(900)
def test_an_openhands_run_through_the_serve_takes_its_pooled_sandbox(
    tmp_path: Path, openhands_runtime: OpenHandsRuntime
) -> None:
    home = make_home(tmp_path, openhands_runtime.venv_path)
    repo = create_demo_repo(tmp_path / "calc")
    config = tmp_path / "synthorg.toml"
    config.write_text(
        '[[gateway.providers]]\nname = "scripted"\nkind = "scripted"\nmodels = ["m"]\n'
        'script = "synthorg.engine.openhands.scripts:openhands_fix_script"\n'
        '[run]\nmodel = "m"\n[openhands]\npool_size = 1\n'
        f"[server]\nrepository_roots = [{json.dumps(str(tmp_path))}]\n"
    )
    with serving(home, config, SYNTHORG_LOG_LEVEL="DEBUG") as serve:
        done = subprocess.run(
            [
                *SYNTHORG,
                "run",
                "Fix the failing test.",
                "--repo",
                str(repo),
                "-c",
                str(config),
                "--loop",
                "openhands",
                "--engine",
                "serve",
            ],
            env=cli_env(home),
            capture_output=True,
            text=True,
            timeout=600,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        assert f"via serve pid {serve.proc.pid}" in output and "loop: openhands" in output
        # The pool hands a slot over only once it is started: a run that came earlier waits
        # for it rather than start cold, so this holds however busy the machine is.
        serve.wait_for('"sandbox.pool_hit"', _conversation(output))
        assert '"sandbox.pool_miss"' not in serve.log()
