"""The judge's verdict: its own pytest runs the hidden tests, each test id is read from its report.

Nothing the judged tree holds can choose the runner or its configuration:
- the judge venv's interpreter runs with ``-I`` (no cwd, PYTHONPATH or user site on sys.path,
  so a ``pytest/``, ``unittest/`` or ``sitecustomize.py`` in the tree is never imported for it);
- ``--import-mode=append``: the tree is importable for the code under test, after the stdlib
  and pytest, never before them;
- ``-c`` the judge's own ini, written into the tree's root after the export (the tree's
  pytest.ini, setup.cfg, tox.ini, pyproject.toml are not read; relative paths in options
  resolve against the tree), ``--rootdir`` the fresh tree, ``-p no:cacheprovider``, plugin
  autoload off;
- conftest.py files come from the base commit and the test patch (check.py), never the agent.

The verdict is per test id from the JUnit XML report, written outside the tree: every
FAIL_TO_PASS and PASS_TO_PASS id must be there and have passed. A process that exits before
writing the report (``os._exit(0)`` at import) leaves every id unrun: not resolved.
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

REPORT_NAME = "junit.xml"
"""The report's file name in the check's state dir (outside the judged tree)."""

INI_NAME = ".synthorg-judge.ini"
"""Where the judge writes its own pytest.ini in the judged tree (over any file of that name)."""

REPORT_CAP = 32 * 1024 * 1024
"""A larger report is not parsed (the code under test could write it): not resolved."""

JUDGE_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
"""The judged process's environment besides the suite's own hints."""

_RUNNERS = (("python", "-m", "pytest"), ("python3", "-m", "pytest"), ("pytest",))
_NOT_PASSED = ("failure", "error", "skipped")


@dataclass(frozen=True)
class Verdict:
    """Each expected test id as the report shows it."""

    passed: tuple[str, ...]
    failed: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def resolved(self) -> bool:
        return bool(self.passed) and not self.failed and not self.missing

    def summary(self) -> str:
        """One line: how many passed, and the ids that failed or never ran."""
        parts = [f"{len(self.passed)} passed"]
        if self.failed:
            parts.append(f"failed: {_some(self.failed)}")
        if self.missing:
            parts.append(f"did not run: {_some(self.missing)}")
        return "judge: " + "; ".join(parts)


def _some(ids: Sequence[str], shown: int = 20) -> str:
    """The first ids and how many more (a SWE-bench row may list hundreds)."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def pytest_args(test_command: str | None) -> list[str]:
    """The extra pytest options a suite's ``test_command`` hint carries.

    The judge always runs its own pytest; a hint names that runner (``pytest``, ``python -m
    pytest``) followed by options. Anything else cannot be judged per test id.
    """
    if test_command is None:
        return []
    words = shlex.split(test_command)
    for prefix in _RUNNERS:
        if tuple(words[: len(prefix)]) == prefix:
            return words[len(prefix) :]
    raise ValueError(
        f"test_command {test_command!r}: the judge runs pytest itself; give 'pytest OPTIONS' "
        "(or 'python -m pytest OPTIONS'), or a 'check' command (exit code only)"
    )


def judge_argv(
    *,
    python: str,
    ini: str,
    rootdir: str,
    report: str,
    extra: Sequence[str],
    test_ids: Sequence[str],
) -> list[str]:
    """The judge's command line inside the sandbox (paths as the sandbox shows them).

    pytest is given the files that hold the ids, as SWE-bench's harness does, not the ids: an
    id that no longer exists then shows as not run while the others are still judged (given
    as an argument, it would make pytest refuse the whole run).
    """
    return [
        python,
        *("-I", "-B", "-m", "pytest"),
        *("-c", ini, "--rootdir", rootdir),
        *("-p", "no:cacheprovider", "--import-mode=append"),
        *("-rA", "--tb=short", "--junitxml", report),
        *extra,
        *dict.fromkeys(test_id.split("::")[0] for test_id in test_ids),
    ]


def junit_address(test_id: str) -> tuple[str, str]:
    """(classname, name) pytest's junitxml writes for a node id (its mangle_test_address)."""
    path, bracket, params = test_id.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def read_report(data: bytes | None) -> dict[tuple[str, str], bool]:
    """(classname, name) -> passed, from a JUnit XML report; {} when there is none to trust."""
    if not data or len(data) > REPORT_CAP:
        return {}
    try:
        root = ET.fromstring(data)  # noqa: S314 - size-capped; expat refuses entity blow-ups
    except ET.ParseError:
        return {}
    outcomes: dict[tuple[str, str], bool] = {}
    for case in root.iter("testcase"):
        key = (case.get("classname", ""), case.get("name", ""))
        passed = not any(child.tag in _NOT_PASSED for child in case)
        outcomes[key] = outcomes.get(key, True) and passed  # a teardown error counts too
    return outcomes


def verdict(report: bytes | None, test_ids: Iterable[str]) -> Verdict:
    """Every id passed by name, or not resolved; an id the report lacks did not run."""
    outcomes = read_report(report)
    passed: list[str] = []
    failed: list[str] = []
    missing: list[str] = []
    for test_id in dict.fromkeys(test_ids):
        outcome = outcomes.get(junit_address(test_id))
        (missing if outcome is None else passed if outcome else failed).append(test_id)
    return Verdict(tuple(passed), tuple(failed), tuple(missing))
