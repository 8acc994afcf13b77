"""Fixtures for eval tests: the judge runtime (built once per machine) and a bwrap backend."""

from __future__ import annotations

import shutil

import pytest

from synthorg.runtime.judge import JudgeRuntime, build_judge
from synthorg.sandbox import BwrapSandbox
from tests.eval.judging import judge_home


@pytest.fixture(scope="session")
def judge() -> JudgeRuntime:
    lines: list[str] = []
    try:
        return build_judge(judge_home(), lines.append)
    except Exception as exc:  # keep uv's tail in the failure report
        raise AssertionError("judge build failed:\n" + "\n".join(lines[-30:])) from exc


@pytest.fixture(scope="session")
def bwrap() -> BwrapSandbox:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed (apt-get install bubblewrap)")
    return BwrapSandbox()
