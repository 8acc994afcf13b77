"""Which git the host runs: the one ``PATH`` names, found once per ``PATH`` value, and never
a program in the directory git runs in (a relative ``PATH`` entry)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from synthorg.workspace.git import run_git, run_git_sync

from .gitfixtures import logging_git


async def test_a_git_put_first_on_path_later_is_the_one_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = (await run_git(["--version"], tmp_path)).text
    log = tmp_path / "argv.log"
    monkeypatch.setenv("PATH", logging_git(tmp_path / "bin", log))
    assert (await run_git(["--version"], tmp_path)).text == real
    assert run_git_sync(["--version"], tmp_path).text == real
    assert log.read_text().splitlines() == ["--version", "--version"]


async def test_a_relative_path_entry_never_runs_the_work_trees_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent can write ``bin/git`` into a worktree; with ``bin`` on ``PATH`` as a relative
    entry, a bare ``git`` exec'd in the worktree would run it. The host's own directory is
    where a relative entry is resolved."""
    host, worktree = tmp_path / "host", tmp_path / "worktree"
    planted = tmp_path / "planted-git-ran"
    logging_git(host / "bin", tmp_path / "host.log")
    (worktree / "bin").mkdir(parents=True)
    (worktree / "bin" / "git").write_text(f"#!/bin/sh\ntouch {planted}\n")
    (worktree / "bin" / "git").chmod(0o755)
    monkeypatch.chdir(host)
    monkeypatch.setenv("PATH", f"bin{os.pathsep}{os.environ['PATH']}")
    out = await run_git(["--version"], worktree)
    sync = run_git_sync(["--version"], worktree)
    assert not planted.exists()
    assert out.text.startswith("git version") and sync.text == out.text
    assert (tmp_path / "host.log").read_text().splitlines() == ["--version", "--version"]
