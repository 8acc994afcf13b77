"""SWE-bench JSONL rows as published resolve with the right fix on a fresh machine (issue 34,
finding 2): real runs through the CLI, judged by the judge's own pytest (the sandbox's base
interpreter has none), with a row's test_command and test_env hints honoured."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import tomlkit

from synthorg.eval.starter import materialize
from synthorg.runtime.judge import JudgeRuntime
from tests.eval.judging import link_judge
from tests.eval.test_eval_runs import _cli, _config, _env, _eval_id

pytestmark = [pytest.mark.bwrap, pytest.mark.slow, pytest.mark.timeout(900)]

HINTED_TEST = (
    "import os\n\n\ndef test_the_hint_reached_the_judged_run():\n"
    '    assert os.environ["SUITE_HINT"] == "set"\n'
)


def _rows(tmp_path: Path) -> tuple[Path, list[str]]:
    """Two starter tasks as SWE-bench rows (lists as JSON strings, as published)."""
    suite = tomlkit.parse(materialize(tmp_path / "starter").read_text())
    tasks = [t for t in suite["task"] if t["complexity"] == "trivial"][:2]
    rows, repo_map = [], []
    for index, task in enumerate(tasks):
        repo = f"synthorg/{task['id']}"
        row = {
            "instance_id": f"synthorg__{task['id']}",
            "repo": repo,
            "base_commit": task["base_ref"],
            "problem_statement": task["prompt"],
            "test_patch": task["test_patch"],
            "FAIL_TO_PASS": json.dumps([_hidden_id(str(task["id"]))]),
            "PASS_TO_PASS": "[]",
            "version": "0.1",
            "complexity": "trivial",
        }
        if index == 1:  # the hints: pytest options for the judge, an environment variable
            row["test_command"] = "pytest -p no:doctest -o python_functions=test_*"
            row["test_env"] = {"SUITE_HINT": "set"}
            row["test_patch"] += _new_file("test_hint.py", HINTED_TEST)
            row["PASS_TO_PASS"] = json.dumps(["test_hint.py::test_the_hint_reached_the_judged_run"])
        rows.append(row)
        repo_map += ["--repo-map", f"{repo}={tmp_path / 'starter' / task['repository']}"]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, repo_map


def _hidden_id(task_id: str) -> str:
    """The pytest node id of a starter operator task's hidden test (trivial-00-price_add)."""
    func = task_id.split("-", 2)[2]
    return f"test_hidden_{func.split('_')[0]}.py::TestHidden::test_hidden_{func}"


def _new_file(name: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


def test_swebench_rows_resolve_with_the_right_fix(tmp_path: Path, judge: JudgeRuntime) -> None:
    home, config = tmp_path / "home", _config(tmp_path / "synthorg.toml", "eval-strong")
    env = _env(home, config)
    link_judge(home, judge)
    rows, repo_map = _rows(tmp_path)
    ran = _cli(env, "eval", "run", str(rows), "--arms", "react,hybrid", *repo_map)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with sqlite3.connect(home / "store.db") as db:
        bodies = db.execute(
            "SELECT body FROM eval_items WHERE eval_id = ? AND key LIKE 'result/%'",
            (_eval_id(ran.stdout),),
        ).fetchall()
    results = [json.loads(row[0]) for row in bodies]
    assert len(results) == 4
    for result in results:
        assert result["resolved"], result["check_output"]
        assert "judge: " in result["check_output"] and "passed" in result["check_output"]
    hinted = [r for r in results if r["task_id"].endswith("01-vector_subtract")]
    assert hinted and all("2 passed" in r["check_output"] for r in hinted)
