"""SWE-bench JSONL rows as published resolve with the right fix on a fresh machine (issue 34,
finding 2): real runs through the CLI, judged by the judge's own pytest (the sandbox's base
interpreter has none), with a row's test_command and test_env hints honoured; and the export
is what swebench's own loaders accept, one arm and repeat per file (finding 5)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
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
    arms = ("--arms", "react,hybrid", "--repeats", "2", "--concurrency", "4")
    ran = _cli(env, "eval", "run", str(rows), *arms, *repo_map)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with sqlite3.connect(home / "store.db") as db:
        bodies = db.execute(
            "SELECT body FROM eval_items WHERE eval_id = ? AND key LIKE 'result/%'",
            (_eval_id(ran.stdout),),
        ).fetchall()
    results = [json.loads(row[0]) for row in bodies]
    assert len(results) == 8
    for result in results:
        assert result["resolved"], result["check_output"]
        assert "judge: " in result["check_output"] and "passed" in result["check_output"]
    hinted = [r for r in results if r["task_id"].endswith("01-vector_subtract")]
    assert hinted and all("2 passed" in r["check_output"] for r in hinted)

    eval_id = _eval_id(ran.stdout)
    out = tmp_path / "preds"
    exported = _cli(env, "eval", "export", eval_id, "--out", str(out))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    files = sorted(p.name for p in out.iterdir())
    assert files == ["hybrid.r0.jsonl", "hybrid.r1.jsonl", "react.r0.jsonl", "react.r1.jsonl"]
    single = tmp_path / "react.jsonl"
    pick = ("--arm", "react", "--repeat", "1", "--out", str(single))
    one = _cli(env, "eval", "export", eval_id, *pick)
    assert one.returncode == 0, one.stderr
    accepted = _swebench_reads(rows, tmp_path, *(out / name for name in files), single)
    for name, read in zip(files, accepted, strict=False):
        arm, repeat = name.removesuffix(".jsonl").split(".")
        assert read["models"] == [f"synthorg-{arm}-{repeat}"]
        assert read["predictions"] == 2 == read["instances"]
        assert all("return a " in str(patch) for patch in read["patches"])
    assert accepted[-1]["models"] == ["synthorg-react-r1"]
    mixed = _cli(env, "eval", "export", eval_id, "--out", str(tmp_path / "all.jsonl"))
    assert mixed.returncode == 2 and "one file holds one arm" in " ".join(mixed.stderr.split())


_READ = """
import json, sys
from swebench.harness.run_evaluation import get_dataset_from_preds
from swebench.harness.utils import get_predictions_from_file
for path in sys.argv[2:]:
    preds = get_predictions_from_file(path, sys.argv[1], "test")
    keyed = {p["instance_id"]: p for p in preds}
    dataset = get_dataset_from_preds(sys.argv[1], "test", [], keyed, "synthorg-check", False)
    print(json.dumps({
        "predictions": len(keyed),
        "instances": len(dataset),
        "models": sorted({p["model_name_or_path"] for p in preds}),
        "patches": [p["model_patch"] for p in preds],
    }))
"""


def _swebench_reads(dataset: Path, tmp_path: Path, *files: Path) -> list[dict[str, object]]:
    """What swebench's own loaders make of each file (in a scratch cwd: they write logs/)."""
    scratch = tmp_path / "swebench"
    scratch.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", _READ, str(dataset), *map(str, files)],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == len(files), done.stdout
    return [json.loads(line) for line in lines]
