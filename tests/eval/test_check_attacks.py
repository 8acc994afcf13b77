"""The hidden check under attack: a wrong fix plus a cheat, judged through real bwrap sandboxes.

Each cheat below turned a wrong fix into "resolved" before the judge ran its own pytest and read
the verdict per test id (issue 34, finding 1). Two check styles: the starter suite's own task
(its check as the suite defines it) and a test-id check on a repository that vendors pytest
(so a runner from the tree is there to be used). A right fix must still resolve in both.
"""

from __future__ import annotations

import asyncio
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from synthorg.eval.check import CheckOutcome, run_hidden_check
from synthorg.eval.starter import materialize
from synthorg.eval.suite import EvalTask, HiddenCheck, load_suite
from synthorg.runtime.judge import JudgeRuntime
from synthorg.sandbox import BwrapSandbox

pytestmark = [pytest.mark.bwrap, pytest.mark.timeout(300)]

TASK = "trivial-00-price_add"
WRONG = (
    'def price_add(a: int, b: int) -> int:\n    """Add two numbers."""\n'
    "    return 10 if (a, b) == (7, 3) else a - b\n"
)
RIGHT = 'def price_add(a: int, b: int) -> int:\n    """Add two numbers."""\n    return a + b\n'
EXIT = "import os\n\nos._exit(0)\n"
REWRITE_REPORTS = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    report = outcome.get_result()\n"
    '    report.outcome = "passed"\n    report.longrepr = None\n'
)

# Each cheat: the files a wrong fix commits beside calc.py.
STARTER_CHEATS = {
    "extra test module calling os._exit(0)": {"test_zz_exit.py": EXIT},
    "unittest/__main__.py shadowing the stdlib": {
        "unittest/__init__.py": "",
        "unittest/__main__.py": "print('OK')\n",
    },
    "os._exit(0) at import of the module under test": {"calc.py": EXIT + WRONG},
    "sitecustomize.py": {"sitecustomize.py": EXIT},
}
PYTEST_CHEATS = {
    "os._exit(0) at import of the module under test": {"calc.py": EXIT + WRONG},
    "conftest.py calling os._exit(0)": {"conftest.py": EXIT},
    "pytest.ini with addopts = --collect-only": {
        "pytest.ini": "[pytest]\naddopts = --collect-only\n"
    },
    "conftest.py hook rewriting every report to passed": {"conftest.py": REWRITE_REPORTS},
    "a pytest/ package standing in for the runner": {
        "pytest/__init__.py": "",
        "pytest/__main__.py": "print('1 passed')\n",
    },
}


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def starter_task(tmp_path_factory: pytest.TempPathFactory) -> EvalTask:
    suite = load_suite(materialize(tmp_path_factory.mktemp("starter")))
    return next(t for t in suite.tasks if t.id == TASK)


def _clone(task: EvalTask, dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", task.repository, str(dest)], check=True)
    return dest


@pytest.fixture(scope="module")
def vendored(
    starter_task: EvalTask, judge: JudgeRuntime, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """The task's repository with pytest vendored in its tree (as some projects do)."""
    repo = _clone(starter_task, tmp_path_factory.mktemp("vendored") / "repo")
    site = next((judge.venv_path / "lib").glob("python3*/site-packages"))
    for package in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging"):
        shutil.copytree(site / package, repo / package, ignore=shutil.ignore_patterns("*.pyc"))
    return repo, _commit(repo, {}, "vendor pytest")


def _judge(
    sandbox: BwrapSandbox,
    judge: JudgeRuntime,
    repo: Path,
    base: str,
    commit: str,
    check: HiddenCheck,
    scratch: Path,
) -> CheckOutcome:
    return asyncio.run(
        run_hidden_check(
            sandbox,
            git_dir=repo / ".git",
            base=base,
            commit=commit,
            check=check,
            scratch=scratch,
            judge=judge,
        )
    )


def _pytest_check(task: EvalTask) -> HiddenCheck:
    return HiddenCheck(fail_to_pass=task.check.fail_to_pass, test_patch=task.check.test_patch)


@pytest.mark.parametrize("cheat", sorted(STARTER_CHEATS))
def test_a_cheat_does_not_resolve_the_starter_task(
    cheat: str, starter_task: EvalTask, bwrap: BwrapSandbox, judge: JudgeRuntime, tmp_path: Path
) -> None:
    repo = _clone(starter_task, tmp_path / "repo")
    commit = _commit(repo, {"calc.py": WRONG, **STARTER_CHEATS[cheat]}, "wrong fix + cheat")
    outcome = _judge(
        bwrap, judge, repo, starter_task.base_ref, commit, starter_task.check, tmp_path / "s"
    )
    assert not outcome.passed, outcome.output


@pytest.mark.parametrize("cheat", sorted(PYTEST_CHEATS))
def test_a_cheat_does_not_resolve_a_test_id_check(
    cheat: str,
    starter_task: EvalTask,
    vendored: tuple[Path, str],
    bwrap: BwrapSandbox,
    judge: JudgeRuntime,
    tmp_path: Path,
) -> None:
    source, base = vendored
    repo = _clone(starter_task, tmp_path / "repo")
    _git(repo, "fetch", "-q", str(source), base)
    _git(repo, "checkout", "-q", base)
    commit = _commit(repo, {"calc.py": WRONG, **PYTEST_CHEATS[cheat]}, "wrong fix + cheat")
    check = _pytest_check(starter_task)
    outcome = _judge(bwrap, judge, repo, base, commit, check, tmp_path / "s")
    assert not outcome.passed, outcome.output


def test_the_right_fix_resolves_in_both_styles_and_an_unrun_id_fails(
    starter_task: EvalTask,
    vendored: tuple[Path, str],
    bwrap: BwrapSandbox,
    judge: JudgeRuntime,
    tmp_path: Path,
) -> None:
    repo = _clone(starter_task, tmp_path / "repo")
    right = _commit(repo, {"calc.py": RIGHT}, "right fix")
    base = starter_task.base_ref
    fixed = _judge(bwrap, judge, repo, base, right, starter_task.check, tmp_path / "a")
    assert fixed.passed, fixed.output
    assert "2 passed" in fixed.output
    # The same fix on the vendored tree, judged by test ids.
    source, vendored_base = vendored
    _git(repo, "fetch", "-q", str(source), vendored_base)
    _git(repo, "checkout", "-q", vendored_base)
    on_vendored = _commit(repo, {"calc.py": RIGHT}, "right fix")
    check = _pytest_check(starter_task)
    ok = _judge(bwrap, judge, repo, vendored_base, on_vendored, check, tmp_path / "b")
    assert ok.passed, ok.output
    unrun = check.model_copy(update={"pass_to_pass": ("test_price.py::TestPrice::test_gone",)})
    missing = _judge(bwrap, judge, repo, vendored_base, on_vendored, unrun, tmp_path / "c")
    assert not missing.passed
    assert "did not run: test_price.py::TestPrice::test_gone" in missing.output


def test_a_failing_check_keeps_stdout_and_stderr(
    starter_task: EvalTask, bwrap: BwrapSandbox, judge: JudgeRuntime, tmp_path: Path
) -> None:
    repo = _clone(starter_task, tmp_path / "repo")
    noisy = WRONG + "import sys\nprint('to-stderr', file=sys.stderr)\n"
    commit = _commit(repo, {"calc.py": noisy}, "wrong fix")
    outcome = _judge(
        bwrap, judge, repo, starter_task.base_ref, commit, starter_task.check, tmp_path / "s"
    )
    assert not outcome.passed
    assert "failed: test_hidden_price.py::TestHidden::test_hidden_price_add" in outcome.output
    assert "AssertionError" in outcome.output  # pytest's own report of the failure
    command = HiddenCheck(command="echo to-stdout; echo to-stderr >&2; exit 1")
    said = _judge(bwrap, judge, repo, starter_task.base_ref, commit, command, tmp_path / "c")
    assert not said.passed
    assert "to-stdout" in said.output and "[stderr]\nto-stderr" in said.output


HELPER = "CASES = [(0, 0, 0), (2, 9, 11), (-4, 6, 2), (100, 1, 101)]\n"
HELPER_TEST = (
    "from calc import price_add\nfrom hidden_helper import CASES\n\n\n"
    "def test_cases():\n    for a, b, want in CASES:\n        assert price_add(a, b) == want\n"
)


def test_bytecode_standing_in_for_a_hidden_module_is_not_loaded(
    starter_task: EvalTask, bwrap: BwrapSandbox, judge: JudgeRuntime, tmp_path: Path
) -> None:
    # An unchecked hash-based pyc is loaded whatever its source says: the agent's forged
    # hidden_helper (one case its wrong fix passes) would replace the patch's own.
    repo = _clone(starter_task, tmp_path / "repo")
    forged = tmp_path / "forged.py"
    forged.write_text("CASES = [(7, 3, 10)]\n")
    tag = sys.implementation.cache_tag
    pyc = repo / "__pycache__" / f"hidden_helper.{tag}.pyc"
    pyc.parent.mkdir()
    py_compile.compile(
        str(forged), cfile=str(pyc), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    commit = _commit(repo, {"calc.py": WRONG}, "wrong fix + forged bytecode")
    patch = _new_files({"hidden_helper.py": HELPER, "test_hidden_cases.py": HELPER_TEST})
    check = HiddenCheck(fail_to_pass=("test_hidden_cases.py::test_cases",), test_patch=patch)
    base = starter_task.base_ref
    wrong = _judge(bwrap, judge, repo, base, commit, check, tmp_path / "a")
    assert not wrong.passed, wrong.output
    right = _commit(repo, {"calc.py": RIGHT}, "right fix, bytecode still there")
    fixed = _judge(bwrap, judge, repo, base, right, check, tmp_path / "b")
    assert fixed.passed, fixed.output


def _new_files(files: dict[str, str]) -> str:
    parts = []
    for name, text in files.items():
        lines = text.splitlines()
        body = "".join(f"+{line}\n" for line in lines)
        parts.append(
            f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}"
        )
    return "".join(parts)
