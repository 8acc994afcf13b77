"""A completed run's worktree is scanned once for the NO_OP check and the landing together."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.domain import TerminationReason
from synthorg.service.options import RunOptions
from tests.workspace.gitfixtures import git, logging_git

from .conftest import Booter, make_task

pytestmark = pytest.mark.bwrap


async def test_the_gate_lands_the_no_op_checks_scan(
    booted: Booter, demo_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both come after the sandbox is gone: a second ``git add -A`` can only find the same."""
    log = tmp_path / "argv.log"
    monkeypatch.setenv("PATH", logging_git(tmp_path / "bin", log))
    async with booted("demo_fix_script") as components:
        record = await components.service.create(make_task(demo_repo), RunOptions())
        result = await components.service.run(record.id)
        final = await components.store.get_conversation(record.id)
    assert result.termination_reason is TerminationReason.COMPLETED, result.error
    assert result.commit_sha is not None
    calls = [line.split() for line in log.read_text().splitlines()]
    checked = max(i for i, argv in enumerate(calls) if "diff-tree" in argv)  # the NO_OP check
    landed = next(i for i, argv in enumerate(calls) if "update-ref" in argv and "HEAD" in argv)
    assert checked < landed
    assert not [argv for argv in calls[checked:landed] if "add" in argv or "write-tree" in argv]
    # What landed is the run's work: the fixed calc.py, and nothing is left uncommitted.
    assert "return a + b" in git(demo_repo, "show", f"{result.commit_sha}:calc.py")
    assert final.workspace is not None
    assert git(Path(final.workspace.path), "status", "--porcelain") == ""
