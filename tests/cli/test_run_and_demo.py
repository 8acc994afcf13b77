"""The main job as a user runs it: `synthorg demo` and `synthorg run` (Ctrl-C, --resume)."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from synthorg.service.demo import create_demo_repo
from tests.cli.cli_support import SYNTHORG, cli_env, sandboxes_of, started_until

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def test_demo_fixes_the_sample_repo_on_a_branch(tmp_path: Path) -> None:
    done = subprocess.run(
        # Outside the data dir, where a repository may be (service/repositories.py).
        [*SYNTHORG, "demo", "--directory", str(tmp_path / "calc")],
        env=cli_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SCRIPTED" in done.stdout
    assert "tests before, on main: FAIL" in done.stdout
    match = re.search(
        r"tests PASS on branch (synthorg/conv-[0-9a-f]+), commit ([0-9a-f]{12})", done.stdout
    )
    assert match, done.stdout
    assert "+    return a + b" in done.stdout
    repo = tmp_path / "calc"
    shown = subprocess.run(
        ["git", "log", "-1", "--format=%H", match.group(1)],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert shown.stdout.startswith(match.group(2))


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["ctrl-c", "sigterm", "sighup"]
)
def test_ctrl_c_sigterm_or_sighup_cancels_cleanly_and_resume_continues(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """`kill`, systemd and `docker stop` send SIGTERM, a closed terminal SIGHUP: like Ctrl-C."""
    home = tmp_path / "home"
    repo = create_demo_repo(tmp_path / "calc")
    config = tmp_path / "synthorg.toml"
    config.write_text(
        '[[gateway.providers]]\nname = "scripted"\nkind = "scripted"\nmodels = ["m"]\n'
        'script = "tests.service.scripts:progress_five"\nlatency_ms = 200\n[run]\nmodel = "m"\n'
    )
    run, lines = started_until(
        [*SYNTHORG, "run", "write five lines", "--repo", str(repo), "-c", str(config)],
        cli_env(home),
        "│ confirmed-1",  # the observation, not the command echoing it
    )
    assert sandboxes_of(home), "the run should be working inside a sandbox"
    run.send_signal(sig)
    rest, _ = run.communicate(timeout=60)
    output = "".join(lines) + rest
    assert run.returncode == 1, output
    assert "cancelling" in output and re.search(r"termination\s+.\s*cancelled", output), output
    assert not sandboxes_of(home)
    conversation = re.search(r"conversation (conv-[0-9a-f]+)", output)
    assert conversation, output

    resumed = subprocess.run(
        [
            *SYNTHORG,
            "run",
            "--resume",
            conversation.group(1),
            "-c",
            str(config),
            "--message",
            "carry on",
        ],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "completed" in resumed.stdout
    worktree = next((home / "worktrees" / conversation.group(1)).iterdir())
    written = (worktree / "progress.txt").read_text().split()
    # Every step done, in order; a step whose command was cut off by Ctrl-C has an unknown
    # effect ("effect unknown" observation), so the resumed agent may redo that one step.
    assert sorted(set(written)) == ["1", "2", "3", "4", "5"] and written[-1] == "5", written
    assert len(written) - len(set(written)) <= 1, written
