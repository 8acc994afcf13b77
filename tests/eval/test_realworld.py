"""Two SWE-bench instances from a real project's history (tomli, evals/realworld/tomli.json):
as JSONL rows, judged by the judge on the real fix (resolved) and on the base (not resolved).
The rows carry the `test_command` hint the src layout needs (issue 34, finding 2)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from synthorg.eval.check import run_hidden_check
from synthorg.eval.suite import load_suite
from synthorg.runtime.judge import JudgeRuntime
from synthorg.sandbox import BwrapSandbox

pytestmark = [pytest.mark.bwrap, pytest.mark.timeout(300)]

FIXTURE = Path(__file__).resolve().parents[2] / "evals" / "realworld" / "tomli.json"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "fixture",
    "GIT_AUTHOR_EMAIL": "fixture@synthorg.invalid",
    "GIT_COMMITTER_NAME": "fixture",
    "GIT_COMMITTER_EMAIL": "fixture@synthorg.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    env = {**os.environ, **_GIT_ENV}
    done = subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args],
        cwd=repo,
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _repo(instance: dict[str, object], path: Path) -> tuple[str, str]:
    """The instance's files at the upstream base (one commit), then its real fix on top."""
    path.mkdir(parents=True)
    files = instance["files"]
    assert isinstance(files, dict)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git(path, "init", "-q", "-b", "main")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", f"{instance['repo']} at {instance['upstream_base']}")
    base = _git(path, "rev-parse", "HEAD")
    _git(path, "apply", "-", stdin=str(instance["patch"]))
    _git(path, "commit", "-q", "-am", str(instance["problem_statement"]))
    return base, _git(path, "rev-parse", "HEAD")


def test_real_instances_resolve_with_their_fix_and_not_without(
    tmp_path: Path, bwrap: BwrapSandbox, judge: JudgeRuntime
) -> None:
    instances = json.loads(FIXTURE.read_text())["instances"]
    rows, repos, fixes = [], {}, {}
    for instance in instances:
        base, fix = _repo(instance, tmp_path / str(instance["instance_id"]))
        repos[instance["instance_id"]], fixes[instance["instance_id"]] = base, fix
        rows.append(
            {
                "instance_id": instance["instance_id"],
                "repo": f"{instance['repo']}-{instance['instance_id']}",
                "base_commit": base,
                "problem_statement": instance["problem_statement"],
                "test_patch": instance["test_patch"],
                "FAIL_TO_PASS": json.dumps(instance["FAIL_TO_PASS"]),
                "PASS_TO_PASS": json.dumps(instance["PASS_TO_PASS"]),
                "test_command": "pytest -o pythonpath=src",
            }
        )
    suite_path = tmp_path / "tomli.jsonl"
    suite_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    repo_map = {str(r["repo"]): str(tmp_path / str(r["instance_id"])) for r in rows}
    suite = load_suite(suite_path, repo_map)
    assert len(suite.tasks) == 2
    for task in suite.tasks:
        git_dir = Path(task.repository) / ".git"
        for commit, want in ((fixes[task.id], True), (None, False)):
            outcome = asyncio.run(
                run_hidden_check(
                    bwrap,
                    git_dir=git_dir,
                    base=task.base_ref,
                    commit=commit,
                    check=task.check,
                    scratch=tmp_path / "scratch" / task.id,
                    judge=judge,
                )
            )
            assert outcome.passed is want, f"{task.id} {commit}:\n{outcome.output}"
            if not want:
                (f2p,) = task.check.fail_to_pass
                assert f"failed: {f2p}" in outcome.output, outcome.output
