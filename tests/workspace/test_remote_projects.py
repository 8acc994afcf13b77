"""Workspaces that travel: mirrors of a remote project, refs published there, resumed elsewhere.

The remote is a real ``git daemon`` on loopback (push enabled); each "worker" is its own data
dir with its own mirror. What the remote serves is hostile in some tests: refs planted on the
server side, next to the conversation's, or pointing at commits it never made.
"""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import ValidationError

from synthorg.domain.conversation import WorkspaceInfo
from synthorg.errors import ConfigError, UsageError
from synthorg.service.repositories import RepositoryPolicy, RepositoryRefused
from synthorg.settings import load_settings, section
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.errors import RemotePublishError, WorkspaceTamperedError
from synthorg.workspace.gate import CommitGate
from synthorg.workspace.git import GitError
from synthorg.workspace.mirror import Mirrors
from synthorg.workspace.models import GateSummary, Workspace
from synthorg.workspace.remote import ProjectRemote, ProjectsConfig
from synthorg.workspace.worktrees import WorktreeManager
from tests.gitremote import GitDaemon

from .gitfixtures import git, make_repo

CID = "conv-travel"


@pytest.fixture
def url(daemon: GitDaemon, tmp_path: Path) -> str:
    make_repo(tmp_path / "src", {"README.md": b"hello\n", "app.py": b"x = 1\n"})
    daemon.publish("app", tmp_path / "src")
    return daemon.url("app")


class Worker:
    """One machine: its own data dir, mirror, worktrees, checkpoints and gate."""

    def __init__(self, home: Path, url: str) -> None:
        self.mirrors = Mirrors(home, {"app": ProjectRemote(remote=url)})
        self.mirror = self.mirrors.prepare()["app"]
        self.worktrees = WorktreeManager(home, mirrors=self.mirrors)
        self.checkpoints = CheckpointStore(publisher=self.mirrors)
        self.gate = CommitGate(publisher=self.mirrors)

    async def resume(self, recorded: WorkspaceInfo | None, cid: str = CID) -> Workspace:
        return await self.worktrees.resume(self.mirror, cid, recorded)

    def local_refs(self, prefix: str = "refs/synthorg/") -> list[str]:
        out = git(self.mirror, "--git-dir", str(self.mirror / ".git"), "for-each-ref", prefix)
        return [line.split("\t")[1] for line in out.splitlines()]


def _summary() -> GateSummary:
    return GateSummary(
        task_id="task-1",
        title="travel",
        conversation_id=CID,
        loop_type="react",
        turns=1,
        cost_usd=Decimal(0),
    )


def _served_plant(daemon: GitDaemon, ref: str, sha: str) -> None:
    """Write a ref on the server side (what a hostile pusher could leave there)."""
    git(daemon.bare("app"), "update-ref", ref, sha)


async def test_a_run_travels_between_workers_through_the_remote(
    tmp_path: Path, daemon: GitDaemon, url: str
) -> None:
    a, b = Worker(tmp_path / "a", url), Worker(tmp_path / "b", url)
    ws = await a.worktrees.create(a.mirror, CID)
    assert (ws.path / "README.md").read_bytes() == b"hello\n"
    served = daemon.refs("app")
    # The base and the branch are on the remote before any checkpoint.
    assert served["refs/synthorg/base/" + CID] == ws.base_ref
    assert served["refs/heads/synthorg/" + CID] == ws.base_ref

    (ws.path / "app.py").write_text("x = 2\n")
    (ws.path / "new.txt").write_text("untracked\n")
    first = await a.checkpoints.create(ws)
    assert daemon.refs("app")[first.ref] == first.sha
    assert await a.mirrors.publish(ws, checkpoint=first.ref)  # a retried push: the same commit

    # Worker B has never seen the conversation: rebuilt from the remote's newest checkpoint.
    moved = await b.resume(ws.info())
    assert moved.path != ws.path and moved.path.is_relative_to(tmp_path / "b")
    assert (moved.path / "app.py").read_text() == "x = 2\n"
    assert (moved.path / "new.txt").read_text() == "untracked\n"
    assert moved.base_ref == ws.base_ref
    assert moved.restored_from == first.ref and "restored" in moved.note
    second = await b.checkpoints.create(moved)
    assert second.index == first.index + 1  # numbering goes on, no reuse
    (moved.path / "app.py").write_text("x = 3\n")
    third = await b.checkpoints.create(moved)
    assert daemon.refs("app")[third.ref] == third.sha

    # Worker A still has its old worktree: the remote is ahead, so A is restored to it.
    back = await a.resume(ws.info())
    assert back.path == ws.path and back.restored_from == third.ref
    assert (ws.path / "app.py").read_text() == "x = 3\n"
    again = await a.resume(ws.info())  # nothing new on the remote: as this worker left it
    assert again.restored_from is None

    # Landing on B pushes the branch; A (or anyone) sees the commit on the remote.
    landed = await b.gate.land(moved, _summary())
    assert landed.committed and landed.sha
    assert daemon.refs("app")["refs/heads/synthorg/" + CID] == landed.sha
    assert await a.mirrors.landed("app", CID, landed.sha)
    assert not await a.mirrors.landed("app", CID, third.sha)  # a checkpoint, not landed
    assert not await a.mirrors.landed("app", "conv-never", landed.sha)


async def test_the_remote_url_and_credentials_never_reach_the_mirror_config(
    tmp_path: Path, url: str
) -> None:
    a = Worker(tmp_path / "a", url)
    await a.worktrees.create(a.mirror, CID)
    config = (a.mirror / ".git" / "config").read_text()
    assert url not in config and "remote" not in config
    assert [p.name for p in a.mirror.iterdir()] == [".git"]  # its own work tree stays empty


@pytest.mark.parametrize("cid", ["../heads/main", "x/../../heads/main", "a/b", "conv.lock", ""])
async def test_a_conversation_id_cannot_escape_its_ref_namespace(
    tmp_path: Path, url: str, cid: str
) -> None:
    a = Worker(tmp_path / "a", url)
    with pytest.raises(UsageError):
        await a.mirrors.fetch_conversation("app", cid, base=None, with_branch=True)
    with pytest.raises(UsageError):
        await a.resume(None, cid)
    with pytest.raises(UsageError):
        await a.worktrees.create(a.mirror, cid)


async def test_a_checkpoint_outside_the_conversation_is_never_published(
    tmp_path: Path, daemon: GitDaemon, url: str
) -> None:
    a = Worker(tmp_path / "a", url)
    ws = await a.worktrees.create(a.mirror, CID)
    for ref in ("refs/heads/main", f"refs/synthorg/checkpoints/{CID}x/0", "refs/synthorg/base/x"):
        with pytest.raises(ValueError, match="not a checkpoint"):
            await a.mirrors.publish(ws, checkpoint=ref)
    assert daemon.refs("app", "refs/heads/main") == {
        "refs/heads/main": git(daemon.bare("app"), "rev-parse", "main").strip()
    }


async def test_refs_planted_beside_the_conversation_are_ignored(
    tmp_path: Path, daemon: GitDaemon, url: str
) -> None:
    a, b = Worker(tmp_path / "a", url), Worker(tmp_path / "b", url)
    ws = await a.worktrees.create(a.mirror, CID)
    (ws.path / "app.py").write_text("x = 2\n")
    cp = await a.checkpoints.create(ws)
    prefix = f"refs/synthorg/checkpoints/{CID}"
    for planted in (f"{prefix}/a/7", f"{prefix}/07", f"{prefix}x/9", f"{prefix}/9999999999"):
        _served_plant(daemon, planted, cp.sha)

    moved = await b.resume(ws.info())
    assert (moved.path / "app.py").read_text() == "x = 2\n"
    assert sorted(b.local_refs()) == sorted(
        [f"refs/synthorg/base/{CID}", f"{prefix}/{cp.index}"]
    )  # nothing planted came in; the quarantine is empty again


@pytest.mark.parametrize("what", ["checkpoint", "branch", "blob"])
async def test_a_remote_ref_pointing_elsewhere_is_refused_untouched(
    tmp_path: Path, daemon: GitDaemon, url: str, what: str
) -> None:
    a, b = Worker(tmp_path / "a", url), Worker(tmp_path / "b", url)
    ws = await a.worktrees.create(a.mirror, CID)
    await a.checkpoints.create(ws)
    # A commit of another history, put on the server (e.g. by anyone who can push there).
    other = tmp_path / "other"
    foreign = make_repo(other, {"evil.sh": b"rm -rf /\n"})
    subprocess.run(
        ["git", "-C", str(other), "push", "-q", str(daemon.bare("app")), "main:refs/other/x"],
        check=True,
        capture_output=True,
    )
    if what == "checkpoint":
        _served_plant(daemon, f"refs/synthorg/checkpoints/{CID}/5", foreign)
    elif what == "branch":
        _served_plant(daemon, f"refs/heads/synthorg/{CID}", foreign)
    else:
        blob = (
            subprocess.run(
                ["git", "-C", str(daemon.bare("app")), "hash-object", "-w", "--stdin"],
                input=b"not a commit\n",
                capture_output=True,
                check=True,
            )
            .stdout.decode()
            .strip()
        )
        _served_plant(daemon, f"refs/synthorg/checkpoints/{CID}/5", blob)

    with pytest.raises(WorkspaceTamperedError, match="does not descend"):
        await b.resume(ws.info())
    assert not b.worktrees.path_for(CID, "app").exists()
    assert b.local_refs() == []  # nothing installed, quarantine dropped


async def test_a_remote_base_other_than_the_recorded_one_is_refused(
    tmp_path: Path, url: str
) -> None:
    a, b = Worker(tmp_path / "a", url), Worker(tmp_path / "b", url)
    ws = await a.worktrees.create(a.mirror, CID)
    await a.checkpoints.create(ws)
    lied = ws.info().model_copy(update={"base_ref": "1" * 40})
    with pytest.raises(WorkspaceTamperedError, match="store recorded"):
        await b.resume(lied)
    assert b.local_refs() == []


async def test_a_checkpoint_taken_on_the_remote_is_never_overwritten(
    tmp_path: Path, daemon: GitDaemon, url: str
) -> None:
    a = Worker(tmp_path / "a", url)
    ws = await a.worktrees.create(a.mirror, CID)
    _served_plant(daemon, f"refs/synthorg/checkpoints/{CID}/0", ws.base_ref or "")
    (ws.path / "app.py").write_text("x = 9\n")
    with pytest.raises(RemotePublishError):
        await a.checkpoints.create(ws)
    assert daemon.refs("app")[f"refs/synthorg/checkpoints/{CID}/0"] == ws.base_ref


async def test_an_unreachable_remote_fails_creation_and_leaves_nothing(tmp_path: Path) -> None:
    dead = GitDaemon(tmp_path / "nothing")  # never started: nothing listens on its port
    a = Worker(tmp_path / "a", dead.url("app"))
    with pytest.raises(GitError, match="fetch"):
        await a.worktrees.create(a.mirror, CID)
    assert not a.worktrees.path_for(CID, "app").exists()


@pytest.mark.parametrize(
    "remote",
    [
        "https://user:secret@example.com/app.git",
        "https://token@example.com/app.git",
        "git@example.com:app.git",
        "ext::sh -c touch% /tmp/pwned",
        "file://relative/path",
        "/srv/git/app.git",
        "https://example.com/app.git\n",
        "ftp://example.com/app.git",
        "https://example.com/app.git#frag",
    ],
)
def test_remote_urls_without_a_plain_scheme_or_with_credentials_are_refused(remote: str) -> None:
    with pytest.raises(ValidationError):
        ProjectRemote(remote=remote)


@pytest.mark.parametrize(
    "remote",
    [
        "https://example.com/app.git",
        "http://127.0.0.1:8080/app.git",
        "git://127.0.0.1:9418/app.git",
        "ssh://git@example.com/org/app.git",
        "file:///srv/git/app.git",
    ],
)
def test_plain_remote_urls_are_accepted(remote: str) -> None:
    assert ProjectRemote(remote=remote).transport()[0] == (
        f"protocol.{remote.split(':', 1)[0]}.allow",
        "always",
    )


def test_credentials_come_from_the_worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    project = ProjectRemote(remote="https://example.com/app.git", token_env="APP_GIT_TOKEN")
    monkeypatch.delenv("APP_GIT_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="APP_GIT_TOKEN"):
        project.transport()
    monkeypatch.setenv("APP_GIT_TOKEN", "s3cret")
    settings = dict(project.transport())
    assert settings["http.extraHeader"] == "Authorization: Basic eC1hY2Nlc3MtdG9rZW46czNjcmV0"
    assert settings["http.followRedirects"] == "false"
    with pytest.raises(ConfigError, match="https"):
        ProjectRemote(remote="http://example.com/app.git", token_env="APP_GIT_TOKEN").transport()
    key = ProjectRemote(remote="ssh://git@example.com/app.git", ssh_key_file=Path("/k/id"))
    assert dict(key.transport())["core.sshCommand"] == (
        "ssh -o BatchMode=yes -o IdentitiesOnly=yes -i /k/id"
    )


def test_projects_section_and_policy(tmp_path: Path) -> None:
    config = tmp_path / "synthorg.toml"
    config.write_text('[projects.app]\nremote = "git://127.0.0.1:1/app.git"\n')
    projects = section(load_settings(config, env={}), "projects", ProjectsConfig).root
    assert projects["app"].branch == "main"
    config.write_text('[projects.app]\nremote = "https://u:p@example.com/x.git"\n')
    with pytest.raises(ConfigError, match="credentials"):
        section(load_settings(config, env={}), "projects", ProjectsConfig)
    config.write_text('[projects."../x"]\nremote = "git://127.0.0.1:1/app.git"\n')
    with pytest.raises(ConfigError, match="project names"):
        section(load_settings(config, env={}), "projects", ProjectsConfig)

    home = tmp_path / "home"
    policy = RepositoryPolicy.for_server(home, roots=()).with_remote_projects(
        {"app": home / "mirrors" / "app"}
    )
    assert policy.check("project:app") == home / "mirrors" / "app"
    with pytest.raises(RepositoryRefused, match=r"\[projects.other\]"):
        policy.check("project:other")
    with pytest.raises(RepositoryRefused):
        policy.check(home / "mirrors" / "app")  # by path it is the data dir, as before


async def test_a_landing_elsewhere_is_kept_when_the_conversation_resumes(
    tmp_path: Path, daemon: GitDaemon, url: str
) -> None:
    """The branch moved past the newest checkpoint (a landing): resume at the landed commit,
    never at the checkpoint, and never push the branch back under the landing."""
    a, b, c = (Worker(tmp_path / name, url) for name in "abc")
    ws = await a.worktrees.create(a.mirror, CID)
    await a.checkpoints.create(ws)
    moved = await b.resume(ws.info())
    (moved.path / "app.py").write_text("x = 2\n")
    (moved.path / "late.txt").write_text("after the checkpoint\n")
    landed = await b.gate.land(moved, _summary())
    assert landed.sha
    branch = f"refs/heads/synthorg/{CID}"

    for worker, note in ((a, "stale worktree"), (c, "never saw it")):
        again = await worker.resume(ws.info())
        assert (again.path / "late.txt").read_text() == "after the checkpoint\n", note
        assert (again.path / "app.py").read_text() == "x = 2\n", note
        assert git(worker.mirror, "rev-parse", branch).strip() == landed.sha, note
        # The next checkpoint (and its push of the branch) keeps the landing on the remote.
        await worker.checkpoints.create(again)
        assert daemon.refs("app")[branch] == landed.sha, note
