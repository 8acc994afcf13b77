"""`eval resume` refuses an edited suite (issue 34, finding 4) and a live owner in one line
(finding 7): real runs through the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import tomlkit

from synthorg.domain import Complexity
from synthorg.runtime.judge import JudgeRuntime
from tests.eval.judging import link_judge
from tests.eval.test_eval_runs import SYNTHORG, _cli, _config, _env, _eval_id, _items, _suite

pytestmark = [pytest.mark.bwrap, pytest.mark.slow, pytest.mark.timeout(900)]


def test_resume_refuses_a_suite_edited_since_the_plan(tmp_path: Path, judge: JudgeRuntime) -> None:
    home, config = tmp_path / "home", _config(tmp_path / "synthorg.toml", "eval-strong")
    suite = _suite(tmp_path, Complexity.TRIVIAL, limit=1)
    env = _env(home, config)
    link_judge(home, judge)
    ran = _cli(env, "eval", "run", str(suite), "--arms", "react,hybrid")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    eval_id = _eval_id(ran.stdout)
    doc = tomlkit.parse(suite.read_text())
    doc["task"][0]["check"] = "true"  # every wrong fix would now be "resolved"
    suite.write_text(tomlkit.dumps(doc))
    resumed = _cli(env, "eval", "resume", eval_id)
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    text = " ".join((resumed.stdout + resumed.stderr).split())
    assert f"changed since eval {eval_id} was planned" in text
    assert "task trivial-00-price_add: changed check.command" in text
    assert "Traceback" not in text


def test_resume_beside_a_live_eval_is_refused_in_one_line(
    tmp_path: Path, judge: JudgeRuntime
) -> None:
    home, config = tmp_path / "home", _config(tmp_path / "synthorg.toml", "eval-sleepy")
    suite = _suite(tmp_path, Complexity.TRIVIAL, limit=2)
    env = _env(home, config)
    link_judge(home, judge)
    original = subprocess.Popen(
        [*SYNTHORG, "eval", "run", str(suite), "--arms", "react,hybrid", "--concurrency", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert original.stdout is not None
        seen = ""
        while "eval eval-" not in seen:
            line = original.stdout.readline()
            assert line, seen
            seen += line
        eval_id = _eval_id(seen)
        deadline = time.monotonic() + 300
        while not _items(home, eval_id, "conversation/"):  # the first run has started
            assert original.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        resumed = _cli(env, "eval", "resume", eval_id, timeout=300)
        assert original.poll() is None, "the original must still be alive for this to test"
    finally:
        os.killpg(original.pid, signal.SIGKILL)
        original.wait()
        if original.stdout is not None:
            original.stdout.close()
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert "Traceback" not in resumed.stdout + resumed.stderr
    error = [line for line in resumed.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"eval {eval_id} is being run by pid {original.pid}" in error[0]
    assert len(_items(home, eval_id, "conversation/")) == 1, "the resume started nothing"


def test_one_arm_is_refused_in_one_line_before_anything_is_planned(tmp_path: Path) -> None:
    home, config = tmp_path / "home", _config(tmp_path / "synthorg.toml", "eval-strong")
    suite = _suite(tmp_path, Complexity.TRIVIAL, limit=1)
    ran = _cli(_env(home, config), "eval", "run", str(suite), "--arms", "react,")
    assert ran.returncode == 2, ran.stdout + ran.stderr
    text = " ".join((ran.stdout + ran.stderr).split())
    assert "--arms: an eval compares at least two arms, got 1 ('react,')" in text
    assert "validation error" not in text and "Traceback" not in text
    assert not (home / "store.db").exists(), "nothing was planned"
