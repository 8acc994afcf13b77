"""Red team, git and workspace metadata: a hostile run plants a git dir, drivers, hooks and
metadata in its worktree; no host-side path (gate, checkpoint, views, rollback, resume) may
run any of it or mount what it names.

Inside the bwrap sandbox the worktree's ``.git`` file is covered by a read-only neutral file
(sandbox/bwrap.py), so the last step of the recipe, repointing ``.git`` at the planted git dir,
fails: each test asserts that (the host's ``.git`` is byte-identical afterwards, the run is not
refused as tampered) as well as that nothing ran on the host. Host git's own refusal of a
changed ``.git`` (still the guard for a worktree changed some other way) is tested in
``tests/workspace/test_host_git.py``.

Every test drives a real run: the bwrap sandbox, the embedded gateway serving a scripted model
that issues the attack as terminal commands, the native react loop, worktrees, the gate. The
attack's programs each touch a marker in a host directory the sandbox cannot see: if a marker
appears, host code ran something the agent wrote.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import httpx
import pytest

from synthorg.domain import ConversationStatus
from synthorg.service.boot import Components
from synthorg.service.demo import create_demo_repo

from . import redteam_support
from .redteam_git_scripts import PLANS
from .redteam_support import create_planned, ran_on_host

pytestmark = pytest.mark.bwrap

SCRIPT = "tests.sandbox.redteam_git_scripts:planned_commands"
MODEL = "scripted-redteam-git"
HOOKS = ("reference-transaction", "post-index-change", "post-checkout", "pre-commit", "post-commit")


def plant_evil_gitdir(marker: Path, conversation_id: str) -> list[str]:
    """Issue 12's recipe: a git dir the agent built, with drivers, fsmonitor and hooks."""
    m = str(marker)
    cfg = "git config -f /workspace/.evil/config"
    hook = f"#!/bin/sh\\ntouch {m}/hook-$(basename $0)\\ncat >/dev/null 2>&1 || true\\n"
    return [
        "cd /workspace && git init -q /tmp/x && mv /tmp/x/.git /workspace/.evil && git"
        f" --git-dir=/workspace/.evil symbolic-ref HEAD refs/heads/synthorg/{conversation_id}",
        f"{cfg} filter.f.clean \"sh -c 'touch {m}/filter-clean; cat'\""
        f" && {cfg} filter.f.smudge \"sh -c 'touch {m}/filter-smudge; cat'\""
        f" && {cfg} filter.p.process \"sh -c 'touch {m}/filter-process'\""
        f" && {cfg} diff.d.textconv \"sh -c 'touch {m}/textconv; cat'\""
        f" && {cfg} diff.external \"sh -c 'touch {m}/diff-external'\""
        f" && {cfg} merge.m.driver \"sh -c 'touch {m}/merge-driver'\""
        f" && {cfg} core.fsmonitor 'touch {m}/fsmonitor; false'"
        f" && {cfg} core.pager 'touch {m}/pager; cat'"
        f" && {cfg} core.hooksPath .evilhooks",
        f"cd /workspace && mkdir -p .evilhooks .evil/hooks && printf '{hook}' > /tmp/hook"
        f" && for h in {' '.join(HOOKS)}; do cp /tmp/hook .evilhooks/$h;"
        " cp /tmp/hook .evil/hooks/$h; done && chmod +x .evilhooks/* .evil/hooks/*",
        "cd /workspace && printf '* filter=f diff=d merge=m\\n*.txt filter=p\\n' > .gitattributes"
        " && echo planted > planted.txt"
        # Replace rather than write `.git` (the stronger attack); both fail on the cover.
        "; rm -f .git; mv .git .gone; printf 'gitdir: .evil\\n' > .git; cat .git",
    ]


def plant_metadata(conversation_id: str, target: Path) -> str:
    """Finding 2: workspace metadata in the git dir the agent controls, naming a host dir."""
    meta = json.dumps(
        {"conversation_id": conversation_id, "path": str(target), "is_worktree": False}
    )
    evil = "/workspace/.evil/synthorg"
    return f"mkdir -p {evil} && printf '%s' '{meta}' > {evil}/workspace.json"


def booted(home: Path) -> AbstractAsyncContextManager[Components]:
    return redteam_support.booted(home, SCRIPT, MODEL)


async def start_attack(
    components: Components, repo: Path, plan: list[str] | None = None, **options: object
) -> tuple[str, str]:
    """Create a conversation whose model runs ``plan`` (filled in by the caller via PLANS)."""
    record, token = await create_planned(components, repo, "Red team git attack", **options)
    PLANS[token] = plan or []
    return record.id, token


async def host_dotgit(components: Components, conversation_id: str) -> tuple[Path, bytes]:
    """The worktree's ``.git`` file on the host and its bytes (read before the run)."""
    recorded = await components.worktrees.get(conversation_id)
    assert recorded is not None and recorded.is_worktree
    path = Path(recorded.path) / ".git"
    return path, path.read_bytes()


def assert_not_repointed(dotgit: tuple[Path, bytes], error: str | None) -> None:
    """The repoint failed inside: the host's file is as git wrote it, no tamper refusal."""
    path, before = dotgit
    assert path.read_bytes() == before
    assert not (path.parent / ".gone").exists()
    assert error is None or ".git file changed" not in error, error


async def kinds(components: Components, conversation_id: str) -> list[tuple[str, str]]:
    page = await components.store.history(conversation_id, after=0, limit=1000)
    out = []
    for stored in page:
        event = stored.event
        detail = getattr(event, "message", None) or getattr(event, "reason", "") or ""
        out.append((event.kind, str(detail)))
    return out


async def test_commit_gate_runs_nothing_the_agent_planted(tmp_path: Path, marker: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    async with booted(tmp_path / "home") as components:
        cid, token = await start_attack(components, repo)
        dotgit = await host_dotgit(components, cid)
        PLANS[token] = plant_evil_gitdir(marker, cid)
        result = await components.service.run(cid)
        assert ran_on_host(marker) == []
        final = await components.store.get_conversation(cid)
        events = await kinds(components, cid)
        last_status = await last_status_in_log(components, cid)
    assert_not_repointed(dotgit, final.error)
    # The gate ran with the planted drivers, hooks and attributes in the worktree (as data):
    # none ran; the record and the log agree on the end state.
    assert final.status is not ConversationStatus.FAILED, (final, events)
    assert last_status is final.status, events
    assert result.commit_sha is not None, (final, events)
    committed = subprocess.run(
        ["git", "show", "--format=", "--name-only", f"synthorg/{cid}"],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert "planted.txt" in committed and ".git" not in committed, committed


async def last_status_in_log(components: Components, conversation_id: str) -> object:
    """The status the event log ends on (it must agree with the record)."""
    page = await components.store.history(conversation_id, after=0, limit=1000)
    changes = [s.event for s in page if s.event.kind == "status_change"]
    return changes[-1].new  # type: ignore[union-attr]


async def test_checkpoint_runs_nothing_the_agent_planted(tmp_path: Path, marker: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    async with booted(tmp_path / "home") as components:
        cid, token = await start_attack(components, repo)
        dotgit = await host_dotgit(components, cid)
        # The command after the plant is mutating: a checkpoint is taken before it runs.
        PLANS[token] = [*plant_evil_gitdir(marker, cid), "echo more > /workspace/more.txt"]
        await components.service.run(cid)
        events = await kinds(components, cid)
        final = await components.store.get_conversation(cid)
    assert ran_on_host(marker) == []
    assert_not_repointed(dotgit, final.error)
    # The checkpoint ran over the planted worktree, ran nothing, and the command ran after it.
    assert final.status is not ConversationStatus.ERROR, (final, events)
    assert (Path(final.workspace.path) / "more.txt").exists()  # type: ignore[union-attr]


async def test_git_views_run_nothing_the_agent_planted(tmp_path: Path, marker: Path) -> None:
    from synthorg.server import KeyStore, Role, ServerSettings, create_app

    repo = create_demo_repo(tmp_path / "calc")
    keys = KeyStore(tmp_path / "keys.json")
    _, viewer = keys.create("vera", {Role.VIEWER})
    async with booted(tmp_path / "home") as components:
        plan_len = len(plant_evil_gitdir(marker, "x"))
        cid, token = await start_attack(components, repo, max_turns=plan_len)
        dotgit = await host_dotgit(components, cid)
        PLANS[token] = plant_evil_gitdir(marker, cid)
        await components.service.run(cid)  # ends at the turn cap: the gate never runs
        assert_not_repointed(dotgit, None)
        assert ran_on_host(marker) == []
        app = create_app(
            ServerSettings(), store=components.store, run_service=components.service, auth=keys
        )
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://testserver",
                headers={"Authorization": f"Bearer {viewer}"},
            ) as client,
        ):
            answers = {
                view: await client.get(f"/api/conversations/{cid}/{view}")
                for view in ("changes", "diff", "commits")
            }
    assert ran_on_host(marker) == []
    # The views read the planted worktree (attributes naming the drivers included) and ran
    # nothing of it.
    for view, response in answers.items():
        assert response.status_code == 200, (view, response.text)
    assert "planted.txt" in answers["changes"].text, answers["changes"].text


async def test_rollback_runs_nothing_the_agent_planted(tmp_path: Path, marker: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    async with booted(tmp_path / "home") as components:
        plan_len = len(plant_evil_gitdir(marker, "x"))
        cid, token = await start_attack(components, repo, max_turns=plan_len)
        PLANS[token] = plant_evil_gitdir(marker, cid)
        recorded = await components.worktrees.get(cid)  # as recorded before the run
        assert recorded is not None and recorded.is_git
        dotgit = await host_dotgit(components, cid)
        await components.service.run(cid)
        assert_not_repointed(dotgit, None)
        # Control: the run took a checkpoint before each of its commands (read in the repo).
        taken = subprocess.run(
            ["git", "for-each-ref", "--format=%(refname)", f"refs/synthorg/checkpoints/{cid}/"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert len(taken) == plan_len, taken
        # The rollback goes ahead over the planted worktree and runs nothing of it.
        await components.checkpoints.rollback(recorded, 0)
        assert not (Path(recorded.path) / "planted.txt").exists()
    assert ran_on_host(marker) == []


async def test_resume_mounts_and_runs_nothing_the_agent_planted(
    tmp_path: Path, marker: Path
) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    target = tmp_path / "host-data"  # stands for SYNTHORG_HOME or any host directory
    target.mkdir()
    (target / "signing.key").write_text("host secret\n")
    async with booted(tmp_path / "home") as components:
        plant = plant_evil_gitdir(marker, "x")
        cid, token = await start_attack(components, repo, max_turns=len(plant) + 1)
        dotgit = await host_dotgit(components, cid)
        *setup, repoint = plant_evil_gitdir(marker, cid)
        PLANS[token] = [
            *setup,
            plant_metadata(cid, target),
            repoint,  # the last command of the first run: no checkpoint comes after it
            # Only the resumed run gets this far: it would write into whatever is mounted.
            "touch /workspace/written-by-resumed-run && cat /workspace/signing.key",
        ]
        first = await components.service.run(cid)
        assert first.termination_reason.value == "max_turns", first
        resumed = await components.service.run(cid)
        events = await kinds(components, cid)
        final = await components.store.get_conversation(cid)
    assert ran_on_host(marker) == []
    assert sorted(p.name for p in target.iterdir()) == ["signing.key"]
    assert not any("host secret" in d for _, d in events)
    assert_not_repointed(dotgit, final.error)
    # The repoint failed, so the planted metadata was never read: the resume mounted the
    # worktree itself (the resumed run's file landed there) and ended normally.
    assert (dotgit[0].parent / "written-by-resumed-run").exists()
    assert final.status is not ConversationStatus.FAILED, (final, events, resumed)


async def test_core_dump_and_oversize_file_are_refused_by_the_gate(tmp_path: Path) -> None:
    """Finding 6 (gate part): a core dump and a huge file in the worktree are not committed;
    the refusal is an error event and the record and the log both end FAILED."""
    repo = create_demo_repo(tmp_path / "calc")
    core = "\\177ELF\\002\\001\\001" + "\\000" * 9 + "\\004\\000\\076\\000\\001\\000\\000\\000"
    async with booted(tmp_path / "home") as components:
        for name, command, reason in (
            ("core", f"printf '{core}' > core.4242 && head -c 4096 /dev/zero >> core.4242", "core"),
            ("big", "head -c 11000000 /dev/zero > blob.bin", "size limit"),
        ):
            cid, token = await start_attack(components, repo)
            PLANS[token] = [f"cd /workspace && echo work > work.txt && {command}"]
            result = await components.service.run(cid)
            events = await kinds(components, cid)
            final = await components.store.get_conversation(cid)
            last_status = await last_status_in_log(components, cid)
            assert result.commit_sha is None, name
            assert final.status is ConversationStatus.FAILED, (name, final)
            assert last_status is ConversationStatus.FAILED, (name, events)
            assert any(k == "error" and reason in d for k, d in events), (name, events)
            assert final.error is not None and reason in final.error
