"""Where the tests' judge runtime lives, and how a test's data dir borrows it."""

from __future__ import annotations

import os
from pathlib import Path

from synthorg.runtime.judge import JudgeRuntime

# Read at import, before the suite-wide autouse fixture points SYNTHORG_HOME at a temp dir.
_OPERATOR_HOME = os.environ.get("SYNTHORG_HOME")


def judge_home() -> Path:
    """Where bootstrap --tests built the judge: the operator's home, else a per-user cache."""
    if _OPERATOR_HOME:
        return Path(_OPERATOR_HOME)
    return Path.home() / ".cache" / "synthorg-tests" / "home"


def link_judge(home: Path, judge: JudgeRuntime) -> None:
    """Give a test's data dir the once-built judge (no build per test)."""
    runtimes = home / "runtimes"
    runtimes.mkdir(parents=True, exist_ok=True)
    if not (runtimes / "judge").exists():
        (runtimes / "judge").symlink_to(judge.venv_path.parent)
