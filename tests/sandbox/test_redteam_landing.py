"""Red team of the landing from the overlay (fee7010..0a241bd): each attack runs a real
governed run and checks that the landed tree equals a fresh full scan of the final worktree
(or that the gate refuses what the old gate refused), and that the user's index matches HEAD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from synthorg.sandbox.quota import unavailable_reason
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from tests.support import scripted_settings

from .test_landing_from_overlay import _git, _repo, _scratch_tree, _settings
from .test_redteam_more import MODEL, SCRIPT, attack

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]


async def _run(
    tmp_path: Path, plan: list[str], repo: Path | None = None, gate: dict[str, Any] | None = None
) -> tuple[Path, list[str], Any]:
    repo = repo or _repo(tmp_path)
    settings = _settings(tmp_path)
    if gate:
        settings = scripted_settings(
            tmp_path / "home", SCRIPT, model=MODEL,
            sandbox={"limits": {"disk_bytes": 16 << 20}}, gate=gate,
        )  # fmt: skip
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        cid, out, result = await attack(c, repo, plan)
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    return worktree, out, result


def _check_landed(worktree: Path, tmp_path: Path, out: list[str], result: Any) -> str:
    sha = getattr(result, "commit_sha", None)
    assert sha, (out, result)
    landed = _git(worktree, "rev-parse", f"{sha}^{{tree}}").strip()
    scratch = _scratch_tree(worktree, tmp_path)
    diff = (
        _git(worktree, "diff-tree", "-r", "--name-status", scratch, landed)
        if landed != scratch
        else ""
    )
    assert landed == scratch, f"landed tree differs from a full scan:\n{diff}\nout={out}"
    status = _git(worktree, "status", "--porcelain", "--ignored=no")
    assert status == "", f"user's index/worktree dirty after landing:\n{status}"
    return sha


def _check_nothing_landed(worktree: Path, tmp_path: Path, out: list[str], result: Any) -> None:
    """The final worktree is the base's content: no commit, and nothing left to land."""
    assert getattr(result, "commit_sha", None) is None, (out, result)
    assert _scratch_tree(worktree, tmp_path) == _git(worktree, "rev-parse", "HEAD^{tree}").strip()
    assert _git(worktree, "status", "--porcelain", "--ignored=no") == ""


async def test_a_new_file_deleted_after_a_checkpoint(tmp_path: Path, quotas: Path) -> None:
    """A file that exists only in the upper, seen by a checkpoint, then deleted: the upper
    no longer names it (no whiteout for a path the lower lacks)."""
    plan = [
        "cd /workspace && echo ghost > ghost.txt && mkdir -p gdir/sub && echo g > gdir/sub/g"
        " && echo p > pkg/ghost.py && echo ok",
        "cd /workspace && rm -rf ghost.txt gdir pkg/ghost.py && echo keep >> top.txt && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan)
    _check_landed(worktree, tmp_path, out, result)


async def test_a_new_dir_renamed_after_a_checkpoint(tmp_path: Path, quotas: Path) -> None:
    """A directory only in the upper renames in place (no redirect needed): its old name
    leaves the upper without a whiteout."""
    plan = [
        "cd /workspace && mkdir nd && echo n > nd/n && echo ok",
        "cd /workspace && mv nd nd2 && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan)
    _check_landed(worktree, tmp_path, out, result)


async def test_an_ignored_file_landed_through_a_vanished_ignore_file(
    tmp_path: Path, quotas: Path
) -> None:
    """A pure-upper pkg/.gitignore un-ignores *.log (and hides itself) while a checkpoint
    scans; it is deleted after: the rule-file check never sees it, and the ignored
    pkg/x.log, in the scan's index, is updated as a tracked path at landing."""
    plan = [
        "cd /workspace && printf '!*.log\\n.gitignore\\n' > pkg/.gitignore"
        " && echo private > pkg/x.log && echo ok",
        "cd /workspace && rm pkg/.gitignore && echo private2 > pkg/x.log && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan)
    assert (worktree / "pkg/x.log").exists()
    _check_nothing_landed(worktree, tmp_path, out, result)  # x.log is ignored again


async def test_the_changed_file_limit_through_vanished_files(tmp_path: Path, quotas: Path) -> None:
    """[gate] max_changed_files=50: 40 + 40 new files, each batch under the limit at its
    checkpoint, then all deleted; the old gate lands one edit, the new one 81 files."""
    plan = [
        "cd /workspace && mkdir -p m1 && for i in $(seq 40); do echo $i > m1/f$i; done && echo ok",
        "cd /workspace && mkdir -p m2 && for i in $(seq 40); do echo $i > m2/f$i; done && echo ok",
        "cd /workspace && rm -rf m1 m2 && echo e >> top.txt && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan, gate={"max_changed_files": 50})
    sha = getattr(result, "commit_sha", None)
    if sha:
        files = _git(worktree, "diff-tree", "-r", "--name-only", f"{sha}^", sha).split()
        assert len(files) <= 50, f"a commit of {len(files)} files past max_changed_files=50"
    _check_landed(worktree, tmp_path, out, result)


async def test_odd_names(tmp_path: Path, quotas: Path) -> None:
    """Names git reads specially: pathspec magic, a leading dash, a newline, non-UTF-8."""
    plan = [
        "cd /workspace && echo a > ':(glob)*' && echo b > -- && echo c > '-rf'"
        " && echo d > \"$(printf 'nl\\nname')\" && echo e > \"$(printf 'bad\\377')\""
        " && echo f > '*' && echo g > 'pkg/[ab].py' && echo ok",
        "cd /workspace && echo h > \"$(printf 'x\\ty')\" && echo i >> ':(glob)*' && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan)
    _check_landed(worktree, tmp_path, out, result)


async def test_type_swaps(tmp_path: Path, quotas: Path) -> None:
    """A file replaced by a directory and back; a directory by a file; a directory by a
    symlink to a twin tree; a FIFO where a tracked file was; a hard link."""
    plan = [
        "cd /workspace && rm pkg/a.py && mkdir pkg/a.py && echo x > pkg/a.py/x"
        " && rm -rf dir && echo f > dir && mkdir -p twin/sub && echo s > twin/y"
        " && echo x > twin/sub/x && rm -rf old && ln -s twin old && echo ok",
        "cd /workspace && rm -rf pkg/a.py && echo back > pkg/a.py && rm pkg/b.py"
        " && mkfifo pkg/b.py && ln top.txt hard.txt && rm -rf swap && ln -s twin swap"
        " && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan)
    _check_landed(worktree, tmp_path, out, result)


async def test_a_secret_renamed_away(tmp_path: Path, quotas: Path) -> None:
    """.env made, seen by a checkpoint, renamed: the old gate lands notes.txt; a landing
    keeping the vanished .env refuses a secret the worktree does not hold."""
    plan = [
        "cd /workspace && echo TOKEN=1 > .env && echo ok",
        "cd /workspace && mv .env notes.txt && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan)
    _check_landed(worktree, tmp_path, out, result)


async def test_a_nested_repo_made_and_removed(tmp_path: Path, quotas: Path) -> None:
    plan = [
        "cd /workspace && mkdir sub && cd sub && git init -q && git -c user.name=a"
        " -c user.email=a@a commit -q --allow-empty -m x && echo ok",
        "cd /workspace && rm -rf sub && echo e >> top.txt && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan)
    _check_landed(worktree, tmp_path, out, result)


async def test_a_subdirectory_gitattributes(tmp_path: Path, quotas: Path) -> None:
    """A .gitattributes in a subdirectory (kept): the rule-file check sends the landing to
    the full scan, which reads the file under it as the attributes say."""
    plan = [
        "cd /workspace && printf 'a\\r\\nb\\r\\n' > pkg/crlf.txt && echo ok",
        "cd /workspace && printf '*.txt text eol=lf\\n' > pkg/.gitattributes && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan)
    _check_landed(worktree, tmp_path, out, result)


async def test_a_background_writer_across_checkpoints(tmp_path: Path, quotas: Path) -> None:
    """A background loop rewrites a tracked file and a new one while checkpoints scan;
    it is killed with the sandbox. Nothing it made is deleted, so no path leaves the upper."""
    plan = [
        "cd /workspace && (i=0; while :; do i=$((i+1)); echo $i > pkg/a.py; echo $i > bg.txt;"
        " mkdir -p bgd/$((i % 5)); echo $i > bgd/$((i % 5))/f; done) >/dev/null 2>&1 &"
        " sleep 0.3; echo ok",
        "sleep 0.5; echo ok",
        "sleep 0.2; echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan)
    _check_landed(worktree, tmp_path, out, result)


async def test_a_vanished_file_leaves_the_users_status_dirty(tmp_path: Path, quotas: Path) -> None:
    """The ghost of test_a_new_file_deleted_after_a_checkpoint as the user sees it."""
    plan = [
        "cd /workspace && echo g > ghost.txt && echo ok",
        "cd /workspace && rm ghost.txt && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan)
    _check_nothing_landed(worktree, tmp_path, out, result)
