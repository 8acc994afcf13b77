"""The commit gate on real worktrees: with changes, without, with secrets, and in place."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import pytest

from synthorg.errors import ConflictError
from synthorg.workspace import views
from synthorg.workspace.errors import SecretFileError
from synthorg.workspace.gate import CommitGate, commit_message
from synthorg.workspace.models import GateSummary, Workspace
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import commit_shape, git, index_bytes, logging_git, make_repo

FILES = {".gitignore": b"*.log\n", "app.py": b"x = 1\n", "lib/util.py": b"def f():\n    pass\n"}

SUMMARY = GateSummary(
    task_id="task-42",
    title="Add the answer to app.py",
    conversation_id="conv-gate",
    loop_type="react",
    turns=7,
    cost_usd=Decimal("0.01234"),
)

EXPECTED_MESSAGE = (
    "Add the answer to app.py\n\n"
    "Task: task-42\n"
    "Conversation: conv-gate\n"
    "Loop: react\n"
    "Turns: 7\n"
    "Cost: $0.0123\n"
)


async def _workspace(tmp_path: Path, home: Path) -> tuple[Path, Workspace]:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    return repo, await WorktreeManager(home).create(repo, "conv-gate")


async def test_commits_changes_on_the_conversation_branch(tmp_path: Path, home: Path) -> None:
    repo, ws = await _workspace(tmp_path, home)
    main_before = git(repo, "rev-parse", "main").strip()
    (ws.path / "app.py").write_text("x = 42\n")
    (ws.path / "new_module.py").write_text("y = 2\n")
    (ws.path / "lib" / "util.py").unlink()
    (ws.path / "run.log").write_text("ignored output\n")

    result = await CommitGate("Gate Bot", "gate@example.test").land(ws, SUMMARY)

    assert result.committed and result.reason == "committed"
    assert result.branch == "synthorg/conv-gate"
    assert result.sha == git(repo, "rev-parse", "synthorg/conv-gate").strip()
    assert result.message == EXPECTED_MESSAGE
    assert result.files == ["app.py", "lib/util.py", "new_module.py"]
    assert "3 files changed" in result.diffstat and "app.py" in result.diffstat
    assert git(repo, "log", "-1", "--format=%B", result.sha) == EXPECTED_MESSAGE + "\n"
    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn", result.sha).strip() == (
        "Gate Bot <gate@example.test>|Gate Bot"
    )
    assert git(repo, "rev-parse", f"{result.sha}^").strip() == ws.base_ref
    assert git(repo, "show", f"{result.sha}:app.py") == "x = 42\n"
    assert "run.log" not in git(repo, "ls-tree", "-r", "--name-only", result.sha)
    # The branch and index are consistent afterwards; main never moved.
    assert git(ws.path, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "main").strip() == main_before
    assert [c.sha for c in await views.commits(ws)] == [result.sha]

    # Landing again with nothing new: no commit.
    again = await CommitGate().land(ws, SUMMARY)
    assert not again.committed and again.reason == "no changes" and again.sha is None


async def test_no_changes_no_commit(tmp_path: Path, home: Path) -> None:
    _repo, ws = await _workspace(tmp_path, home)
    (ws.path / "only.log").write_text("ignored files are not changes\n")
    head = git(ws.path, "rev-parse", "HEAD").strip()
    result = await CommitGate().land(ws, SUMMARY)
    assert not result.committed and result.reason == "no changes"
    assert git(ws.path, "rev-parse", "HEAD").strip() == head


async def test_secret_file_is_refused_and_nothing_committed(tmp_path: Path, home: Path) -> None:
    _repo, ws = await _workspace(tmp_path, home)
    assert ws.git_dir is not None
    (ws.path / "app.py").write_text("x = 2\n")
    (ws.path / ".env").write_text("API_KEY=sk-live-123\n")
    (ws.path / "deploy").mkdir()
    (ws.path / "deploy" / "server.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    (ws.path / ".env.example").write_text("API_KEY=\n")  # templates are allowed
    head = git(ws.path, "rev-parse", "HEAD").strip()
    status = git(ws.path, "status", "--porcelain=v1", "-uall")
    index = index_bytes(ws.git_dir)

    with pytest.raises(SecretFileError) as caught:
        await CommitGate().land(ws, SUMMARY)

    assert caught.value.files == [".env", "deploy/server.pem"]
    assert ".env" in str(caught.value) and "deploy/server.pem" in str(caught.value)
    assert "Nothing was committed" in str(caught.value)
    assert git(ws.path, "rev-parse", "HEAD").strip() == head
    assert index_bytes(ws.git_dir) == index
    assert git(ws.path, "status", "--porcelain=v1", "-uall") == status

    # Once the secrets are gone the same change lands.
    (ws.path / ".env").unlink()
    (ws.path / "deploy" / "server.pem").unlink()
    result = await CommitGate().land(ws, SUMMARY)
    assert result.committed and result.files == [".env.example", "app.py"]


async def test_deleting_a_tracked_secret_is_allowed(tmp_path: Path, home: Path) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, {**FILES, "old.key": b"secret\n"})
    ws = await WorktreeManager(home).create(repo, "conv-gate")
    (ws.path / "old.key").unlink()
    result = await CommitGate().land(ws, SUMMARY)
    assert result.committed and result.files == ["old.key"]


async def test_custom_patterns_and_path_patterns(tmp_path: Path, home: Path) -> None:
    gate = CommitGate(secret_patterns=("secrets/*", "*.token"), allowed_patterns=())
    assert gate.secret_files(["secrets/a", "a/secrets/b", "x.token", "deep/y.token", ".env"]) == [
        "secrets/a",
        "x.token",
        "deep/y.token",
    ]
    default = CommitGate()
    assert default.secret_files(["id_rsa", "id_rsa.pub", ".env.local", "cert.p12", "ok.py"]) == [
        "id_rsa",
        ".env.local",
        "cert.p12",
    ]


async def test_in_place_and_non_git_workspaces_are_not_committed(
    tmp_path: Path, home: Path
) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    in_place = await WorktreeManager(home).create(repo, "conv-ip", enabled=False)
    (repo / "app.py").write_text("changed in place\n")
    head = git(repo, "rev-parse", "HEAD").strip()
    result = await CommitGate().land(in_place, SUMMARY)
    assert not result.committed and "no commit possible" in result.reason
    assert git(repo, "rev-parse", "HEAD").strip() == head

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "f").write_text("x")
    ws = await WorktreeManager(home).create(plain, "conv-plain", enabled=False)
    result = await CommitGate().land(ws, SUMMARY)
    assert not result.committed and "in place" in result.reason


async def test_refuses_when_head_left_the_branch(tmp_path: Path, home: Path) -> None:
    _, ws = await _workspace(tmp_path, home)
    git(ws.path, "checkout", "-q", "--detach")
    (ws.path / "app.py").write_text("x = 3\n")
    with pytest.raises(ConflictError, match="not on branch synthorg/conv-gate"):
        await CommitGate().land(ws, SUMMARY)


async def test_works_without_git_identity_in_env(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, ws = await _workspace(tmp_path, home)
    for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(key)
    (ws.path / "app.py").write_text("x = 5\n")
    result = await CommitGate().land(ws, SUMMARY)
    assert result.committed
    assert git(ws.path, "log", "-1", "--format=%an", "HEAD").strip() == "SynthOrg"


def test_message_is_deterministic_and_bounded() -> None:
    assert commit_message(SUMMARY) == EXPECTED_MESSAGE
    assert commit_message(SUMMARY) == commit_message(SUMMARY.model_copy())
    long = SUMMARY.model_copy(update={"title": "word " * 40})
    first_line = commit_message(long).splitlines()[0]
    assert len(first_line) == 72 and first_line.endswith("...")


async def test_the_in_process_landing_is_the_commit_git_would_write(
    tmp_path: Path, home: Path
) -> None:
    # Two conversations from the same base, the same edit: libgit2's commit and git
    # commit-tree's differ only in their timestamps.
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    shapes = []
    for conversation, in_process in (("conv-lib", True), ("conv-git", False)):
        ws = await WorktreeManager(home).create(repo, conversation)
        (ws.path / "app.py").write_text("x = 42\n")
        gate = CommitGate("Gate Bot", "gate@example.test", in_process=in_process)
        result = await gate.land(ws, SUMMARY)
        assert result.committed and result.sha is not None
        assert git(repo, "rev-parse", f"synthorg/{conversation}").strip() == result.sha
        shapes.append(commit_shape(repo, result.sha))
    assert shapes[0] == shapes[1]
    assert shapes[0][-len(EXPECTED_MESSAGE.splitlines()) :] == EXPECTED_MESSAGE.splitlines()
    git(repo, "fsck", "--strict", "--no-dangling")


async def test_a_gate_without_diffstat_lands_the_same_commit_with_no_diff_tree(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service's gate (``diffstat=False``) spends no git process on a diffstat nobody
    reads; what it commits is what a gate with the diffstat commits."""
    log = tmp_path / "git-argv.log"
    path = os.environ["PATH"]
    logged = logging_git(tmp_path / "bin", log)
    trees = []
    for name, gate in (("with", CommitGate()), ("without", CommitGate(diffstat=False))):
        repo = tmp_path / name
        make_repo(repo, FILES)
        ws = await WorktreeManager(home).create(repo, f"conv-{name}")
        (ws.path / "app.py").write_text("x = 42\n")
        (ws.path / "new_module.py").write_text("y = 2\n")
        log.write_text("")
        monkeypatch.setenv("PATH", logged)
        result = await gate.land(ws, SUMMARY)
        monkeypatch.setenv("PATH", path)
        stats = [line for line in log.read_text().splitlines() if "--stat" in line]
        assert result.committed and result.files == ["app.py", "new_module.py"]
        assert bool(result.diffstat) == bool(stats) == (name == "with"), (name, stats)
        trees.append(git(repo, "rev-parse", f"{result.sha}^{{tree}}").strip())
    assert trees[0] == trees[1]


async def test_a_scan_taken_before_head_moved_is_not_landed(tmp_path: Path, home: Path) -> None:
    """The NO_OP check's scan stands in for the gate's own only while HEAD is where it was."""
    repo, ws = await _workspace(tmp_path, home)
    (ws.path / "app.py").write_text("x = 42\n")
    scanned, _ = await views.scan_changes(ws)
    gate = CommitGate("Gate Bot", "gate@example.test")
    first = await gate.land(ws, SUMMARY, scanned=scanned)
    assert first.committed and git(repo, "show", f"{first.sha}:app.py") == "x = 42\n"
    (ws.path / "app.py").write_text("x = 43\n")  # after the first landing moved HEAD

    second = await gate.land(ws, SUMMARY, scanned=scanned)  # that scan is stale now

    assert second.committed and git(repo, "show", f"{second.sha}:app.py") == "x = 43\n"
    assert git(repo, "rev-parse", f"{second.sha}^").strip() == first.sha


async def test_the_landed_index_is_the_scans_own_with_no_git_reset(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small tree's private index holds exactly the landed tree, with fresh stat data: it
    becomes the worktree's index (what ``git reset --mixed HEAD`` gave), no process spent."""
    repo, ws = await _workspace(tmp_path, home)
    (ws.path / "app.py").write_text("x = 42\n")
    (ws.path / "new_module.py").write_text("y = 2\n")
    (ws.path / "run.log").write_text("ignored\n")
    log = tmp_path / "git-argv.log"
    monkeypatch.setenv("PATH", logging_git(tmp_path / "bin", log))
    result = await CommitGate(diffstat=False).land(ws, SUMMARY)
    assert result.committed
    assert not [line for line in log.read_text().splitlines() if "reset" in line.split()]
    assert git(ws.path, "status", "--porcelain") == ""
    assert (
        git(ws.path, "write-tree").strip()
        == git(repo, "rev-parse", f"{result.sha}^{{tree}}").strip()
    )
    # Racy-clean entries stay detectable: a same-size edit right after landing is seen.
    (ws.path / "app.py").write_text("x = 43\n")
    assert git(ws.path, "status", "--porcelain") == " M app.py\n"
    assert not (ws.git_dir / "index.lock").exists() if ws.git_dir else False
