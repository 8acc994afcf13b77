"""The eval's own git calls (the starter's repositories, a suite's cloned URL, the hidden check's
test patch) run through the hardened runner: nothing planted in a repository runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.errors import BoundaryError, UsageError
from synthorg.eval.runner import local_repo
from synthorg.eval.starter import materialize, starter_tasks
from synthorg.eval.tree import apply_test_patch
from synthorg.workspace.git import run_git_sync


def _hostile_config(where: Path, marker: Path) -> str:
    """A config naming programs (a hooks dir, an fsmonitor) that leave ``marker`` behind."""
    hooks = where / "evil-hooks"
    hooks.mkdir(parents=True)
    for name in ("pre-commit", "post-commit", "post-checkout", "post-applypatch"):
        hook = hooks / name
        hook.write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        hook.chmod(0o755)
    fsmonitor = where / "evil-fsmonitor"
    fsmonitor.write_text(f"#!/bin/sh\necho fsmonitor >> {marker}\nexit 1\n")
    fsmonitor.chmod(0o755)
    return f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = {fsmonitor}\n"


def test_a_config_planted_in_a_starter_repository_runs_nothing(tmp_path: Path) -> None:
    # The starter's git once took the repository directory as HOME, so a `.gitconfig` left
    # there was read as the global config by its `git add` and `git commit`.
    marker = tmp_path / "ran"
    task = starter_tasks()[0]
    repo = tmp_path / "starter" / "repos" / task.id
    repo.mkdir(parents=True)
    (repo / ".gitconfig").write_text(_hostile_config(tmp_path, marker))

    materialize(tmp_path / "starter")

    assert not marker.exists(), marker.read_text()
    log = run_git_sync(["log", "--format=%an %s"], repo).text
    assert log.strip() == f"SynthOrg starter {task.id}: starting point"


def test_starter_commits_stay_the_same_bytes(tmp_path: Path) -> None:
    # Fixed author, dates and branch: every machine writes the same base commits.
    task = starter_tasks()[0]
    materialize(tmp_path / "a")
    materialize(tmp_path / "b")
    heads = {
        run_git_sync(["rev-parse", "HEAD"], tmp_path / d / "repos" / task.id).text
        for d in ("a", "b")
    }
    assert len(heads) == 1
    branch = run_git_sync(["symbolic-ref", "HEAD"], tmp_path / "a" / "repos" / task.id).text
    assert branch.strip() == "refs/heads/main"


def _source(tmp_path: Path, marker: Path) -> Path:
    src = tmp_path / "source"
    materialize(src)
    repo = src / "repos" / starter_tasks()[0].id
    with (repo / ".git" / "config").open("a") as handle:
        handle.write(_hostile_config(tmp_path, marker))
    return repo


def test_a_suite_url_is_cloned_by_the_hardened_runner(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    repo = _source(tmp_path, marker)
    home = tmp_path / "home"

    clone = local_repo(f"file://{repo}", home)

    assert clone.is_relative_to(home)
    assert (clone / "calc.py").is_file()
    assert local_repo(f"file://{repo}", home) == clone  # cloned once
    assert not marker.exists(), marker.read_text()


def test_a_url_git_cannot_be_given_safely_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="ssh://"):
        local_repo("git@example.invalid:team/repo.git", tmp_path)
    with pytest.raises(UsageError, match="credentials"):
        local_repo("https://user:secret@example.invalid/repo.git", tmp_path)


def test_a_local_path_without_a_work_tree_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a git repository"):
        local_repo(str(tmp_path), tmp_path)


def test_the_test_patch_applies_outside_any_repository(tmp_path: Path) -> None:
    # The judged tree is a plain directory: git must not find a repository above it (here the
    # hostile one the scratch dir sits in) and read its config.
    marker = tmp_path / "ran"
    repo = _source(tmp_path, marker)
    dest = repo / "scratch" / "tree"
    dest.mkdir(parents=True)
    patch = (
        "diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n"
        "@@ -0,0 +1 @@\n+x = 1\n"
    )
    apply_test_patch(repo / ".git", "HEAD", dest, patch)
    assert (dest / "new.py").read_text() == "x = 1\n"
    assert not marker.exists(), marker.read_text()
    stale = "--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-not in calc.py\n+x = 2\n"
    with pytest.raises(BoundaryError, match="does not apply"):
        apply_test_patch(repo / ".git", "HEAD", dest, stale)
