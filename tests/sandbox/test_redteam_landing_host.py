"""Red team, round two, of the landing from the overlay's lower scan (d08c09f): host-side
starting states (what the user or another owner left in the worktree before the run), through
real runs. On d08c09f the unmapped owner's files were missing from the commit (and its .env
landed past the secret rule: the lower scan could not read the dir and git only warned), and
a change staged on the host left ``git status`` dirty after the landing."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from synthorg.sandbox import quota as quota_mod
from synthorg.sandbox.quota import unavailable_reason
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry

from . import test_redteam_more as more
from .redteam_git_scripts import PLANS
from .test_landing_from_overlay import _git, _repo, _settings
from .test_redteam_landing import _check_landed
from .test_redteam_more import attack

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]


def _before_mount(monkeypatch: pytest.MonkeyPatch, prep: Callable[[Path], None]) -> None:
    """Run ``prep(worktree)`` on the host just before the run's quota is mounted."""
    real = quota_mod.WorkspaceQuota._mount_new.__func__  # type: ignore[attr-defined]

    def wrapped(cls: Any, worktree: Path, *a: Any, **k: Any) -> Any:
        prep(worktree)
        return real(cls, worktree, *a, **k)

    monkeypatch.setattr(quota_mod.WorkspaceQuota, "_mount_new", classmethod(wrapped))


async def _run(
    tmp_path: Path, plan: list[str], repo: Path | None = None
) -> tuple[Path, list[str], Any]:
    repo = repo or _repo(tmp_path)
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(c, repo, plan)
    worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
    return worktree, out, result


async def test_files_of_an_unmapped_owner(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host files owned by a uid the idmap does not map (shown as 65534 below the overlay):
    root reads them on the host, but through the idmapped lower it has no DAC override."""

    def prep(wt: Path) -> None:
        (wt / "foreign").mkdir(mode=0o700)
        (wt / "foreign/data.txt").write_text("foreign\n")
        os.chown(wt / "foreign/data.txt", 4242, 4242)
        os.chmod(wt / "foreign/data.txt", 0o600)
        os.chown(wt / "foreign", 4242, 4242)

    _before_mount(monkeypatch, prep)
    worktree, out, result = await _run(tmp_path, ["cd /workspace && echo x > new.txt && echo ok"])
    _check_landed(worktree, tmp_path, out, result)


async def test_a_staged_change_the_run_does_not_touch(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's index holds a staged edit the worktree no longer has; the full-scan gate's
    reset --mixed cleared it, the per-path reset leaves it."""

    def prep(wt: Path) -> None:
        (wt / "dir/y").write_text("staged\n")
        _git(wt, "add", "dir/y")
        (wt / "dir/y").write_text("y\n")

    _before_mount(monkeypatch, prep)
    worktree, out, result = await _run(tmp_path, ["cd /workspace && echo x > new.txt && echo ok"])
    _check_landed(worktree, tmp_path, out, result)


async def test_an_opaque_dir_dropping_its_ignore_file(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _repo(tmp_path)
    (repo / "keep").mkdir()
    (repo / "keep/.gitignore").write_text("*.tmp\n")
    (repo / "keep/t").write_text("t\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "keep")

    def prep(wt: Path) -> None:
        (wt / "keep/a.tmp").write_text("ignored\n")
        (wt / "keep/b.tmp").write_text("ignored\n")

    _before_mount(monkeypatch, prep)
    plan = [
        "cd /workspace && rm -rf keep && mkdir keep && echo x > keep/a.tmp && echo ok",
    ]
    worktree, out, result = await _run(tmp_path, plan, repo)
    _check_landed(worktree, tmp_path, out, result)


async def test_a_resumed_run_after_a_host_edit(tmp_path: Path, quotas: Path) -> None:
    """Run 1 lands from the overlay; the user edits the worktree; run 2 on the same
    conversation lands from its own overlay."""
    repo = _repo(tmp_path)
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(
            c, repo, ["cd /workspace && echo one > r1.txt && echo e >> pkg/b.py && echo ok"]
        )
        assert getattr(result, "commit_sha", None), (out, result)
        worktree = next((tmp_path / "home" / "worktrees" / cid).iterdir())
        token = more.CURRENT[-1]
        (worktree / "top.txt").write_text("user\n")
        (worktree / "r1.txt").write_text("uSer\n")
        os.utime(worktree / "r1.txt", (0, 0))
        (worktree / "host-new.txt").write_text("hn\n")
        PLANS[token] = [*PLANS[token], "cd /workspace && echo two > r2.txt && echo ok"]
        result = await c.service.run(cid, message="go on")
        out = more.OUTPUTS.get(token, [])
    _check_landed(worktree, tmp_path, out, result)


async def test_a_secret_in_a_dir_of_an_unmapped_owner(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full-scan gate refuses foreign/.env (SecretFileError); on d08c09f the landing from
    the lower scan never saw it and committed."""

    def prep(wt: Path) -> None:
        (wt / "foreign").mkdir(mode=0o700)
        (wt / "foreign/.env").write_text("TOKEN=1\n")
        os.chown(wt / "foreign", 4242, 4242)

    _before_mount(monkeypatch, prep)
    _, _, result = await _run(tmp_path, ["cd /workspace && echo x > new.txt && echo ok"])
    assert getattr(result, "commit_sha", None) is None, ("landed past a secret", result)
