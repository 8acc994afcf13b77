"""Evaluations as a user runs them: the CLI, real runs (worktree, gateway, bwrap, gate), the
hidden check, promotion into the config, resume after SIGKILL, and the check under attack."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomlkit

from synthorg.domain import Complexity, Task
from synthorg.engine.selection import select_loop_type
from synthorg.eval.starter import materialize
from synthorg.faultpoints import ANNOUNCE, PAUSE_ENV
from synthorg.runtime.judge import JudgeRuntime
from synthorg.settings import load_settings
from tests.eval.judging import link_judge

pytestmark = [pytest.mark.bwrap, pytest.mark.slow, pytest.mark.timeout(1200)]

SYNTHORG = [sys.executable, "-m", "synthorg.cli.app"]
ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "eval-strong": "synthorg.eval.scripts:strong_script",
    "eval-averse": "synthorg.eval.scripts:plan_averse_script",
    "eval-snoop": "tests.eval.scripts:snooping_script",
    "eval-sleepy": "tests.eval.scripts:sleepy_script",
    "eval-cheat": "tests.eval.scripts:cheating_script",
}


def _config(path: Path, model: str, **engine: str) -> Path:
    doc = tomlkit.document()
    if engine:
        doc["engine"] = engine
    doc["gateway"] = {
        "providers": [
            {"name": "scripted", "kind": "scripted", "models": list(MODELS), "scripts": MODELS}
        ],
        "prices": {m: {"input_per_mtok_usd": 3, "output_per_mtok_usd": 15} for m in MODELS},
    }
    doc["run"] = {"model": model}
    path.write_text(tomlkit.dumps(doc))
    return path


def _suite(tmp_path: Path, *complexities: Complexity, limit: int = 6) -> Path:
    full = tomlkit.parse(materialize(tmp_path / "starter").read_text())
    wanted = [c.value for c in complexities]
    tasks = [t for t in full["task"] if t["complexity"] in wanted]
    picked = [t for c in wanted for t in tasks if t["complexity"] == c][: limit * len(wanted)]
    doc = tomlkit.document()
    aot = tomlkit.aot()
    for task in picked:
        aot.append(task)
    doc["task"] = aot
    path = tmp_path / "starter" / "subset.toml"
    path.write_text(tomlkit.dumps(doc))
    return path


def _env(home: Path, config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(
        SYNTHORG_HOME=str(home), SYNTHORG_CONFIG=str(config), PYTHONPATH=str(ROOT), COLUMNS="200"
    )
    return env


def _cli(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SYNTHORG, *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _eval_id(output: str) -> str:
    match = re.search(r"eval (eval-[0-9a-f]+):", output)
    assert match, output
    return match.group(1)


def _items(home: Path, eval_id: str, prefix: str) -> list[dict[str, object]]:
    with sqlite3.connect(home / "store.db") as db:
        rows = db.execute(
            "SELECT body FROM eval_items WHERE eval_id = ? AND key LIKE ?", (eval_id, prefix + "%")
        ).fetchall()
    return [json.loads(r[0]) for r in rows]


def test_a_loop_that_resolves_more_is_promoted_into_the_config(
    tmp_path: Path, judge: JudgeRuntime
) -> None:
    # Selection off, every complexity runs hybrid today: that is the incumbent.
    config = _config(tmp_path / "synthorg.toml", "eval-averse", default_loop_type="hybrid")
    home = tmp_path / "home"
    suite = _suite(tmp_path, Complexity.MODERATE)
    env = _env(home, config)
    link_judge(home, judge)
    ran = _cli(env, "eval", "run", str(suite), "--arms", "hybrid,react", "--concurrency", "4")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    eval_id = _eval_id(ran.stdout)
    results = _items(home, eval_id, "result/")
    assert len(results) == 12
    assert all(r["resolved"] for r in results if r["arm"] == "react")
    assert not any(r["resolved"] for r in results if r["arm"] == "hybrid")
    assert all(r["commit_sha"] for r in results if r["arm"] == "react")

    dry = _cli(env, "eval", "promote", eval_id)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "moderate: hybrid -> react" in dry.stdout
    assert "McNemar) test p = 0.0312" in dry.stdout
    assert "routing moderate: hybrid -> react" in dry.stdout
    assert "turns on loop_auto_select_enabled (it was off)" in dry.stdout
    assert "+loop_complexity_overrides" in dry.stdout.replace(" ", "")
    assert "moderate" not in config.read_text()  # a dry run writes nothing

    applied = _cli(env, "eval", "promote", eval_id, "--apply", "--by", "alice")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    settings = load_settings(config)
    for complexity in Complexity:  # only what the eval decided changed
        task = Task(id="t", project_id="p", prompt="x", complexity=complexity, repository="/r")
        want = "react" if complexity is Complexity.MODERATE else "hybrid"
        assert select_loop_type(task, settings.engine) == want
    (record,) = _items(home, eval_id, "promotion/")
    assert record["by"] == "alice" and record["routing"]["moderate"] == "react"

    out = tmp_path / "report"
    reported = _cli(env, "eval", "report", eval_id, "--out", str(out))
    assert reported.returncode == 0, reported.stderr
    page = (out / "report.html").read_text()
    assert len(page.encode()) < 1_000_000 and "<pre>" not in page
    # Written after the promotion: react is what moderate runs now.
    assert "<th>incumbent (routed today)</th>" in page
    assert "<td>moderate</td><td>react</td><td>keep react</td>" in page
    assert "Resolve rate over tasks (95% Wilson CI)" in page
    assert "| moderate | react | 6 | 6 |" in (out / "summary.md").read_text()
    exported = tmp_path / "preds.jsonl"
    exporting = _cli(env, "eval", "export", eval_id, "--arm", "react", "--out", str(exported))
    assert exporting.returncode == 0, exporting.stderr
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [r["instance_id"] for r in rows] == sorted({str(r["task_id"]) for r in results})
    assert {r["model_name_or_path"] for r in rows} == {"synthorg-react"}
    assert any("+    return a + b" in r["model_patch"] for r in rows)


def test_the_agent_can_neither_read_nor_forge_the_hidden_check(
    tmp_path: Path, judge: JudgeRuntime
) -> None:
    home, config = tmp_path / "home", _config(tmp_path / "synthorg.toml", "eval-snoop")
    suite = _suite(tmp_path, Complexity.TRIVIAL, limit=2)
    env = _env(home, config)
    link_judge(home, judge)
    ran = _cli(env, "eval", "run", str(suite), "--arms", "react,plan_execute", "--concurrency", "2")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    results = _items(home, _eval_id(ran.stdout), "result/")
    react = [r for r in results if r["arm"] == "react"]
    assert react and not any(r["resolved"] for r in react)
    # The forged files were committed by the gate, yet the check used the suite's own tests.
    assert all(r["commit_sha"] for r in react)
    assert all("test_hidden" in str(r["model_patch"]) for r in react)
    with sqlite3.connect(home / "store.db") as db:
        bodies = [row[0] for row in db.execute("SELECT body FROM events")]
    assert bodies, "the runs logged their events"
    assert not any("(2, 9), (-4, 6)" in body for body in bodies), "hidden test content leaked"


def test_resume_after_sigkill_finishes_and_runs_nothing_twice(
    tmp_path: Path, judge: JudgeRuntime
) -> None:
    home, config = tmp_path / "home", _config(tmp_path / "synthorg.toml", "eval-strong")
    suite = _suite(tmp_path, Complexity.TRIVIAL, limit=3)
    env = _env(home, config)
    link_judge(home, judge)
    proc = subprocess.Popen(
        [*SYNTHORG, "eval", "run", str(suite), "--arms", "react,hybrid", "--concurrency", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen = ""
    while "eval eval-" not in seen:  # log lines (e.g. a sandbox warning) may come first
        line = proc.stdout.readline()
        assert line, seen
        seen += line
    eval_id = _eval_id(seen)
    deadline = time.monotonic() + 600
    while len(_items(home, eval_id, "result/")) < 2:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    judged_before = {str(r["conversation_id"]) for r in _items(home, eval_id, "result/")}
    resumed = _cli(env, "eval", "resume", eval_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    results = _items(home, eval_id, "result/")
    assert len(results) == 6
    assert judged_before <= {str(r["conversation_id"]) for r in results}
    conversations = _items(home, eval_id, "conversation/")
    assert len(conversations) == 6
    with sqlite3.connect(home / "store.db") as db:
        (made,) = db.execute(
            "SELECT count(*) FROM conversations WHERE project_id = ?", (f"eval-{eval_id}",)
        ).fetchone()
    assert made == 6, "every (task, arm) ran in exactly one conversation"
    assert all(r["resolved"] for r in results if r["arm"] == "react")


def test_a_kill_right_after_an_items_conversation_was_made_runs_it_once(
    tmp_path: Path, judge: JudgeRuntime
) -> None:
    """The conversation exists, the eval's record of it not yet: resume must find that one,
    not make a second (the kill lands there on purpose, not by timing)."""
    home, config = tmp_path / "home", _config(tmp_path / "synthorg.toml", "eval-strong")
    suite = _suite(tmp_path, Complexity.TRIVIAL, limit=1)
    env = _env(home, config)
    link_judge(home, judge)
    proc = subprocess.Popen(
        [*SYNTHORG, "eval", "run", str(suite), "--arms", "react,hybrid", "--concurrency", "1"],
        env={**env, PAUSE_ENV: "eval.conversation_created"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen = ""
    while ANNOUNCE not in seen:
        line = proc.stdout.readline()
        assert line, seen
        seen += line
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    eval_id = _eval_id(seen)
    resumed = _cli(env, "eval", "resume", eval_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    results = _items(home, eval_id, "result/")
    assert len(results) == 2
    with sqlite3.connect(home / "store.db") as db:
        made = db.execute(
            "SELECT id FROM conversations WHERE project_id = ?", (f"eval-{eval_id}",)
        ).fetchall()
    assert sorted(id_ for (id_,) in made) == sorted(str(r["conversation_id"]) for r in results), (
        "each item ran in exactly one conversation"
    )


def test_an_agent_that_plants_runner_cheats_resolves_nothing(
    tmp_path: Path, judge: JudgeRuntime
) -> None:
    home, config = tmp_path / "home", _config(tmp_path / "synthorg.toml", "eval-cheat")
    suite = _suite(tmp_path, Complexity.TRIVIAL, limit=2)
    env = _env(home, config)
    link_judge(home, judge)
    ran = _cli(env, "eval", "run", str(suite), "--arms", "react,plan_execute", "--concurrency", "2")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    react = [r for r in _items(home, _eval_id(ran.stdout), "result/") if r["arm"] == "react"]
    assert len(react) == 2 and all(r["commit_sha"] for r in react)
    for result in react:  # the cheats were committed, and judged without effect
        assert "unittest/__main__.py" in str(result["model_patch"])
        assert "conftest.py" in str(result["model_patch"])
        assert not result["resolved"], result["check_output"]
        assert "judge: 0 passed" in str(result["check_output"])
