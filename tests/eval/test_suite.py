"""Suite parsers: SWE-bench rows as published (lists as JSON strings), native TOML and YAML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synthorg.domain import Complexity
from synthorg.eval.suite import SuiteError, load_suite

# Field names and shapes as in the published SWE-bench datasets (lists are JSON strings).
_ROW = {
    "instance_id": "astropy__astropy-12907",
    "repo": "astropy/astropy",
    "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
    "problem_statement": "Modeling's `separability_matrix` does not compute separability...",
    "hints_text": "",
    "created_at": "2022-03-03T15:14:54Z",
    "version": "4.3",
    "test_patch": "diff --git a/t.py b/t.py\nnew file mode 100644\n--- /dev/null\n+++ b/t.py\n"
    "@@ -0,0 +1 @@\n+x = 1\n",
    "FAIL_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_separable[compound_model6]"]',
    "PASS_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_coord_matrix"]',
    "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
}


def _write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_swebench_rows_with_string_encoded_lists(tmp_path: Path) -> None:
    second = {
        **_ROW,
        "instance_id": "django__django-11099",
        "repo": "django/django",
        "FAIL_TO_PASS": ["tests.a"],
        "PASS_TO_PASS": "[]",
    }
    path = _write_jsonl(tmp_path / "lite.jsonl", [_ROW, second])
    suite = load_suite(path, {"astropy/astropy": "/src/astropy", "django/django": "/src/django"})
    first = suite.tasks[0]
    assert first.id == "astropy__astropy-12907"
    assert first.repository == "/src/astropy"
    assert first.base_ref == _ROW["base_commit"]
    assert first.check.fail_to_pass == (
        "astropy/modeling/tests/test_separable.py::test_separable[compound_model6]",
    )
    assert first.check.test_patch.startswith("diff --git")
    assert suite.tasks[1].check.fail_to_pass == ("tests.a",)
    assert suite.tasks[1].check.pass_to_pass == ()


def test_every_bad_row_is_reported_with_file_line_and_field(tmp_path: Path) -> None:
    missing = {k: v for k, v in _ROW.items() if k != "base_commit"}
    bad_list = {**_ROW, "instance_id": "x-2", "FAIL_TO_PASS": "not json"}
    dashed = {**_ROW, "instance_id": "x-3", "base_commit": "--upload-pack=evil"}
    path = _write_jsonl(tmp_path / "bad.jsonl", [_ROW, missing, "{oops", bad_list, dashed])
    with pytest.raises(SuiteError) as caught:
        load_suite(path, {"astropy/astropy": "/src/astropy"})
    problems = caught.value.problems
    assert f"{path}:2: base_commit: missing" in problems
    assert any(p.startswith(f"{path}:3: (row): not JSON") for p in problems)
    assert any(p.startswith(f"{path}:4:") for p in problems)
    assert any(p.startswith(f"{path}:5: base_ref:") for p in problems)
    assert not any(p.startswith(f"{path}:1:") for p in problems)


def test_a_repo_without_a_mapping_is_refused(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "s.jsonl", [_ROW])
    with pytest.raises(SuiteError, match=r"s\.jsonl:1: repo: 'astropy/astropy' has no local"):
        load_suite(path, {})


def test_native_toml_with_relative_repository(tmp_path: Path) -> None:
    path = tmp_path / "team.toml"
    path.write_text(
        '[[task]]\nid = "fix-add"\nrepository = "repos/calc"\nbase_ref = "main"\n'
        'prompt = "Fix add"\ncheck = "python3 -m unittest"\ncomplexity = "trivial"\n'
        'tags = ["math"]\n\n'
        '[[task]]\nid = "ids"\nrepository = "/abs/repo"\nbase_ref = "v1"\nprompt = "p"\n'
        'fail_to_pass = ["tests/test_a.py::test_x"]\n'
    )
    suite = load_suite(path)
    assert suite.tasks[0].repository == str(tmp_path / "repos" / "calc")
    assert suite.tasks[0].complexity is Complexity.TRIVIAL
    assert suite.tasks[0].check.command == "python3 -m unittest"
    assert suite.tasks[1].check.fail_to_pass == ("tests/test_a.py::test_x",)


def test_native_toml_errors_name_the_line_of_the_task(tmp_path: Path) -> None:
    path = tmp_path / "team.toml"
    path.write_text(
        '[[task]]\nid = "ok"\nrepository = "/r"\nbase_ref = "main"\nprompt = "p"\ncheck = "true"\n'
        '\n[[task]]\nid = "no check"\nrepository = "/r"\nbase_ref = "main"\nprompt = ""\n'
    )
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    text = "\n".join(caught.value.problems)
    assert f"{path}:8: id:" in text  # "no check" has a space
    assert f"{path}:8: prompt:" in text
    assert f"{path}:8: check:" in text


def test_native_yaml(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(
        "tasks:\n"
        "  - id: one\n    repository: /r\n    base_ref: main\n    prompt: p\n    check: 'true'\n"
        "  - id: two\n    repository: /r\n    base_ref: main\n    prompt: p\n"
    )
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    assert any(p.startswith(f"{path}:7: check:") for p in caught.value.problems)


def test_duplicate_ids_and_empty_suites_are_refused(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "dup.jsonl", [_ROW, _ROW])
    with pytest.raises(SuiteError, match="duplicated: astropy__astropy-12907"):
        load_suite(path, {"astropy/astropy": "/src"})
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    with pytest.raises(SuiteError, match="no task"):
        load_suite(empty)


def test_a_row_hint_the_judge_cannot_use_is_refused_at_load(tmp_path: Path) -> None:
    bad_runner = {**_ROW, "instance_id": "x-1", "test_command": "./runtests.py"}
    bad_env = {**_ROW, "instance_id": "x-2", "test_env": {"BAD-NAME": "1"}}
    path = _write_jsonl(tmp_path / "hints.jsonl", [bad_runner, bad_env])
    with pytest.raises(SuiteError) as caught:
        load_suite(path, {"astropy/astropy": "/src/astropy"})
    text = "\n".join(caught.value.problems)
    assert f"{path}:1:" in text and "the judge runs pytest itself" in text
    assert f"{path}:2:" in text and "BAD-NAME" in text
