"""Red team: what the agent leaves in the worktree bounds the host's work, through real runs.

A sparse file of 1 GiB apparent size costs the sandbox's quota nothing; host git hashed all of
it at the pre-action checkpoint, the NO_OP check and the gate (52 CPU-s for three, 3 MiB of
objects), to refuse it as oversize at the end. Many small files were committed and rendered
whole. Sizes and counts are now checked before anything is hashed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from synthorg.engine.lifecycle import events_after
from synthorg.service.boot import boot
from synthorg.service.demo import create_demo_repo
from synthorg.service.loops import default_provisioner, default_registry
from tests.support import scripted_settings

from .test_redteam_more import MODEL, SCRIPT, attack

pytestmark = [pytest.mark.bwrap, pytest.mark.timeout(600)]

GIB = 1 << 30


def _object_sizes(repo: Path) -> list[int]:
    listed = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectsize)"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [int(size) for size in listed.split()]


async def test_a_sparse_gigabyte_is_refused_before_host_git_hashes_it(tmp_path: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    home = tmp_path / "home"
    settings = scripted_settings(home, SCRIPT, model=MODEL, gate={"max_file_bytes": 1 << 20})
    plan = [
        "cd /workspace && truncate -s 1G sparse.bin && du -k sparse.bin && echo made",
        "echo more > /workspace/more.txt",  # mutating: the pre-action checkpoint runs first
    ]
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        cid, out, _ = await attack(c, repo, plan)
        final = await c.store.get_conversation(cid)
    assert "made" in out[0], out
    assert final.status.value == "failed", final
    error = final.error or ""
    assert "sparse.bin (1073741824 bytes)" in error and "max_file_bytes" in error, error
    refs = ["git", "for-each-ref", "--format=%(refname)", f"refs/synthorg/checkpoints/{cid}/"]
    checkpoints = subprocess.run(refs, cwd=repo, capture_output=True, text=True).stdout
    assert checkpoints.split(), "the pre-action checkpoint was taken (without the sparse file)"
    # Nothing of it was hashed into the repository's objects.
    assert max(_object_sizes(repo)) < 1 << 20, "host git hashed the sparse file"


async def test_many_files_are_refused_before_host_git_adds_them(tmp_path: Path) -> None:
    repo = create_demo_repo(tmp_path / "calc")
    home = tmp_path / "home"
    settings = scripted_settings(home, SCRIPT, model=MODEL, gate={"max_changed_files": 1000})
    plan = [
        "cd /workspace && mkdir many && cd many && seq 20000 | xargs touch && ls | wc -l",
    ]
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        cid, out, result = await attack(c, repo, plan)
        final = await c.store.get_conversation(cid)
    assert "20000" in out[0], out
    assert result.commit_sha is None, result  # type: ignore[attr-defined]
    assert final.status.value == "failed", final
    error = final.error or ""
    assert "20000 changed files" in error and "max_changed_files" in error, error
    # The index never took them: no tree with 20,000 entries was written.
    assert len(_object_sizes(repo)) < 1000


async def test_many_files_stop_the_run_at_its_next_checkpoint(tmp_path: Path) -> None:
    """The pre-action checkpoint of the next mutating command meets them first: it refuses
    to add them, and the run ends with that reason instead of the host hashing on."""
    repo = create_demo_repo(tmp_path / "calc")
    home = tmp_path / "home"
    settings = scripted_settings(home, SCRIPT, model=MODEL, gate={"max_changed_files": 1000})
    plan = [
        "cd /workspace && mkdir many && cd many && seq 20000 | xargs touch && ls | wc -l",
        "echo more > /workspace/more.txt",
    ]
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        cid, out, result = await attack(c, repo, plan)
        final = await c.store.get_conversation(cid)
    assert "20000" in out[0] and len(out) == 1, out  # the second command never ran
    assert result.commit_sha is None, result  # type: ignore[attr-defined]
    assert final.status.value in ("failed", "error"), final
    error = final.error or ""
    assert "20000 changed files" in error and "max_changed_files" in error, error
    assert len(_object_sizes(repo)) < 1000


async def test_host_work_over_its_cpu_budget_fails_the_run_and_lands_nothing(
    tmp_path: Path,
) -> None:
    """Eight 9 MB random files are under every size limit, yet host git spends ~3-4 CPU-s
    compressing them (0.05 CPU-s/MB here; more files, more). With `[limits] host_work_cpu_s
    = 1` the host-side step is killed by the kernel at the run's budget and the run fails
    saying so."""
    repo = create_demo_repo(tmp_path / "calc")
    before = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout
    settings = scripted_settings(
        tmp_path / "home", SCRIPT, model=MODEL, limits={"host_work_cpu_s": 1}
    )
    plan = [
        "cd /workspace && for i in 1 2 3 4 5 6 7 8; do head -c 9000000 /dev/urandom > n$i.bin;"
        " done && echo made"
    ]
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        cid, out, result = await attack(c, repo, plan)
        final = await c.store.get_conversation(cid)
        events = await events_after(c.store, cid)
    assert "made" in out[0], out
    assert result.commit_sha is None, result  # type: ignore[attr-defined]
    assert final.status.value == "failed", final
    error = final.error or ""
    assert "host-work CPU budget" in error and "host_work_cpu_s" in error, error
    codes = [getattr(e.event, "code", None) for e in events]
    assert "host_work_over_budget" in codes, codes
    branch = subprocess.run(
        ["git", "for-each-ref", "--format=%(objectname)", f"refs/heads/synthorg/{cid}"],
        cwd=repo,
        capture_output=True,
        text=True,
    ).stdout
    assert branch.strip() in ("", before.strip()), "the branch moved: something landed"
