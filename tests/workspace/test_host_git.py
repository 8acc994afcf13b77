"""Host git on a worktree: one hardened environment, the recorded dirs, nothing run.

Hostile content goes where it can reach host git: the worktree (its ``.git`` file,
``.gitattributes``, a git dir the agent built) and, to test the decision that no driver runs
even when the user defined it, the repository's own config. Every program those name touches
a marker; the marker directory must stay empty through snapshots, checkpoints, views,
rollback and the gate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synthorg.workspace import views
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.errors import WorkspaceTamperedError
from synthorg.workspace.gate import CommitGate
from synthorg.workspace.git import driver_overrides, git_env
from synthorg.workspace.models import GateSummary, Workspace
from synthorg.workspace.worktrees import WorktreeManager, recorded_workspace

from .gitfixtures import git, make_repo

SUMMARY = GateSummary(
    task_id="task-h",
    title="Hostile",
    conversation_id="conv-h",
    loop_type="react",
    turns=1,
    cost_usd=Decimal("0.01"),
)
FILES = {"app.py": b"x = 1\n", "notes.txt": b"plain text\n"}
HOOKS = ("reference-transaction", "post-index-change", "post-checkout", "pre-commit")


def touch(marker: Path, name: str) -> str:
    return f"touch {marker / name}"


def set_config(config: Path, key: str, value: str) -> None:
    """Write one setting with git's own quoting (a raw ';' would start a comment)."""
    subprocess.run(["git", "config", "-f", str(config), key, value], check=True)


def arm(git_dir: Path, marker: Path, drivers: list[str]) -> None:
    """Give ``git_dir`` drivers, fsmonitor, a pager and hooks that each touch a marker."""
    config = git_dir / "config"
    for n, driver in enumerate(drivers):
        for key in ("clean", "smudge"):
            set_config(config, f"filter.{driver}.{key}", f"sh -c '{touch(marker, key)}-{n}; cat'")
        set_config(config, f"filter.{driver}.process", f"sh -c '{touch(marker, 'process')}-{n}'")
        set_config(config, f"filter.{driver}.required", "true")
        set_config(config, f"diff.{driver}.textconv", f"sh -c '{touch(marker, 'textconv')}; cat'")
    set_config(config, "core.fsmonitor", f"{touch(marker, 'fsmonitor')}; false")
    set_config(config, "core.pager", f"{touch(marker, 'pager')}; cat")
    set_config(config, "core.hooksPath", str(git_dir / "evilhooks"))
    set_config(config, "diff.external", f"sh -c '{touch(marker, 'external')}'")
    for hooks in (git_dir / "hooks", git_dir / "evilhooks"):
        hooks.mkdir(exist_ok=True)
        for name in HOOKS:
            script = hooks / name
            script.write_text(f"#!/bin/sh\n{touch(marker, 'hook-' + name)}\n")
            script.chmod(0o755)


def control_fires(work_tree: Path, git_dir: Path, marker: Path) -> None:
    """Positive control: plain git (as a user would run it) does run what was planted."""
    subprocess.run(
        ["git", f"--git-dir={git_dir}", f"--work-tree={work_tree}", "add", "-A", "--dry-run"],
        capture_output=True,
        check=False,
    )
    subprocess.run(
        ["git", f"--git-dir={git_dir}", f"--work-tree={work_tree}", "status"],
        capture_output=True,
        check=False,
    )
    assert fired(marker), "the planted programs never ran under plain git"
    for path in marker.iterdir():
        path.unlink()


def attributes(drivers: list[str]) -> bytes:
    names = [d for d in drivers if d and not any(c in d for c in " \t\n\\\"'#")]
    lines = [f"* filter={d} diff={d}" for d in names] or ["* filter=x"]
    return ("\n".join(lines) + "\n").encode()


def fired(marker: Path) -> list[str]:
    return sorted(p.name for p in marker.iterdir())


async def exercise(ws: Workspace) -> None:
    """Every host path that runs git on a worktree."""
    store = CheckpointStore()
    first = await store.create(ws)
    (ws.path / "app.py").write_text("x = 2\n")
    (ws.path / "new.txt").write_text("new\n")
    await store.create(ws)
    assert {c.path for c in await views.changes(ws)} >= {"app.py", "new.txt"}
    assert "x = 2" in await views.diff(ws)
    await views.commits(ws)
    await store.rollback(ws, first.index)
    (ws.path / "app.py").write_text("x = 3\n")
    landed = await CommitGate().land(ws, SUMMARY)
    assert landed.committed


_DRIVERS = st.lists(
    st.text(
        alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters='"\\'),
        min_size=1,
        max_size=12,
    ),
    min_size=1,
    max_size=3,
    unique_by=str.lower,
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(drivers=_DRIVERS)
async def test_drivers_hooks_and_fsmonitor_in_the_repository_config_never_run(
    tmp_path_factory: pytest.TempPathFactory, drivers: list[str]
) -> None:
    """Decision: no driver runs on the host, even one the user's repository defines."""
    tmp = tmp_path_factory.mktemp("hostile")
    marker = tmp / "marker"
    marker.mkdir()
    repo = tmp / "proj"
    make_repo(repo, {**FILES, ".gitattributes": attributes(drivers)})
    arm(repo / ".git", marker, drivers)
    (repo / "control.txt").write_text("control\n")
    control_fires(repo, repo / ".git", marker)
    (repo / "control.txt").unlink()
    ws = await WorktreeManager(tmp / "home").create(repo, "conv-h")
    await exercise(ws)
    assert fired(marker) == []
    # The gate committed the worktree's bytes: no clean filter rewrote them.
    assert git(repo, "show", "synthorg/conv-h:app.py") == "x = 3\n"


async def test_git_dir_built_in_the_worktree_is_never_used(tmp_path: Path, home: Path) -> None:
    marker = tmp_path / "marker"
    marker.mkdir()
    repo = tmp_path / "proj"
    make_repo(repo, FILES)
    manager = WorktreeManager(home)
    ws = await manager.create(repo, "conv-h")
    await CheckpointStore().create(ws)
    # Issue 12's recipe, as the agent writes it from inside the sandbox.
    evil = ws.path / ".evil"
    git(tmp_path, "init", "-q", str(tmp_path / "x"))
    (tmp_path / "x" / ".git").rename(evil)
    git(evil, "--git-dir", str(evil), "symbolic-ref", "HEAD", "refs/heads/synthorg/conv-h")
    arm(evil, marker, ["f"])
    (ws.path / ".gitattributes").write_bytes(attributes(["f"]))
    control_fires(ws.path, evil, marker)
    (ws.path / ".evil" / "synthorg").mkdir()
    (ws.path / ".evil" / "synthorg" / "workspace.json").write_text(
        json.dumps({"conversation_id": "conv-h", "path": str(home), "is_worktree": False})
    )
    recorded_dotgit = (ws.path / ".git").read_bytes()
    variants = {
        "relative gitdir": b"gitdir: .evil\n",
        "absolute gitdir": f"gitdir: {evil}\n".encode(),
        "trailing junk": recorded_dotgit + b"x",
    }
    for what, content in variants.items():
        (ws.path / ".git").write_bytes(content)
        await _all_refused(manager, ws, what)
    (ws.path / ".git").unlink()
    (ws.path / ".git").symlink_to(tmp_path / "dotgit-copy")
    (tmp_path / "dotgit-copy").write_bytes(recorded_dotgit)
    await _all_refused(manager, ws, "symlinked .git")
    (ws.path / ".git").unlink()
    evil.rename(ws.path / ".git")
    await _all_refused(manager, ws, ".git directory")
    assert fired(marker) == []
    # The host-only record still names the real worktree; nothing the agent wrote moved it.
    again = recorded_workspace(ws.path, "conv-h")
    assert again is not None and again.git_dir == ws.git_dir and again.path == ws.path
    # Restored, everything works again (the refusals were about the .git file alone).
    (ws.path / ".git").rename(tmp_path / "evil-kept")
    (ws.path / ".git").write_bytes(recorded_dotgit)
    (ws.path / ".gitattributes").unlink()
    await exercise(ws)
    assert fired(marker) == []


async def _all_refused(manager: WorktreeManager, ws: Workspace, what: str) -> None:
    store = CheckpointStore()
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "checkpoint": lambda: store.create(ws),
        "rollback": lambda: store.rollback(ws, 0),
        "changes": lambda: views.changes(ws),
        "diff": lambda: views.diff(ws),
        "commits": lambda: views.commits(ws),
        "gate": lambda: CommitGate().land(ws, SUMMARY),
        "resume": lambda: manager.resume(ws.repo or ws.path, "conv-h", ws.info()),
    }
    for name, call in calls.items():
        try:
            await call()
        except WorkspaceTamperedError as exc:
            assert ".git" in str(exc), (what, name, exc)
        else:
            raise AssertionError(f"{name} ran on a worktree with a {what}")


def test_env_builder_drops_inherited_redirections_and_programs(tmp_path: Path) -> None:
    """Run in a child whose environment carries every hostile variable: none survives."""
    hostile = {
        "GIT_DIR": "/evil",
        "GIT_WORK_TREE": "/evil",
        "GIT_COMMON_DIR": "/evil",
        "GIT_INDEX_FILE": "/evil",
        "GIT_CONFIG_PARAMETERS": "'core.fsmonitor'='touch /evil'",
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.fsmonitor",
        "GIT_CONFIG_VALUE_0": "touch /evil",
        "GIT_CONFIG_GLOBAL": "/evil/config",
        "GIT_EXTERNAL_DIFF": "touch /evil",
        "GIT_SSH_COMMAND": "touch /evil",
        "GIT_PAGER": "touch /evil",
        "GIT_ASKPASS": "touch /evil",
    }
    code = (
        "import json, pathlib; from synthorg.workspace.git import git_env; env = git_env(); "
        "n = [k for k, v in env.items() if v == 'core.hooksPath'][0].rsplit('_', 1)[1]; "
        "hooks = pathlib.Path(env['GIT_CONFIG_VALUE_' + n]); "
        "env['_hooks_empty_dir'] = str(hooks.is_dir() and not any(hooks.iterdir())); "
        "env['_global'] = pathlib.Path(env['GIT_CONFIG_GLOBAL']).read_text(); "
        "print(json.dumps(env))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **hostile},
        capture_output=True,
        text=True,
        check=True,
    )
    env = json.loads(out.stdout)
    assert not any("/evil" in value for value in env.values()), env
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_TERMINAL_PROMPT"] == "0"
    settings_ = {
        env[f"GIT_CONFIG_KEY_{n}"]: env[f"GIT_CONFIG_VALUE_{n}"]
        for n in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert settings_["core.fsmonitor"] == "false"
    assert settings_["protocol.allow"] == "never"
    assert settings_["core.hooksPath"] and env["_hooks_empty_dir"] == "True"
    assert "directory = *" in env["_global"]
    assert not Path(settings_["core.hooksPath"]).exists()  # removed when the process ended


def test_env_builder_names_the_recorded_dirs(tmp_path: Path) -> None:
    from synthorg.workspace.git import CheckoutDirs

    dirs = CheckoutDirs(work_tree=tmp_path / "w", git_dir=tmp_path / "g", common_dir=tmp_path / "c")
    env = git_env(checkout=dirs)
    assert (env["GIT_WORK_TREE"], env["GIT_DIR"], env["GIT_COMMON_DIR"]) == (
        str(tmp_path / "w"),
        str(tmp_path / "g"),
        str(tmp_path / "c"),
    )


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["filter", "diff", "merge", "core", "Filter"]),
            st.text(min_size=0, max_size=10),
            st.sampled_from(["clean", "smudge", "process", "required", "textconv", "driver"]),
        ),
        max_size=8,
    )
)
def test_every_filter_driver_seen_is_disarmed(keys: list[tuple[str, str, str]]) -> None:
    names = [f"{section}.{sub}.{key}" for section, sub, key in keys]
    overrides = dict(driver_overrides(names))
    for section, sub, key in keys:
        if section == "filter" and key in ("clean", "smudge", "process") and "\n" not in sub:
            for part in ("clean", "smudge", "process"):
                assert overrides[f"filter.{sub}.{part}"] == ""
            assert overrides[f"filter.{sub}.required"] == "false"
    assert all(name.startswith("filter.") for name in overrides)


async def test_a_driver_added_to_the_configuration_later_is_disarmed_too(
    tmp_path: Path, home: Path
) -> None:
    """The list of drivers to disarm follows the config files (and their includes)."""
    marker = tmp_path / "marker"
    marker.mkdir()
    repo = tmp_path / "proj"
    make_repo(repo, {**FILES, ".gitattributes": b"* filter=late\n*.py filter=inc\n"})
    ws = await WorktreeManager(home).create(repo, "conv-h")
    store = CheckpointStore()
    await store.create(ws)  # the configuration as it was is now known
    config = repo / ".git" / "config"
    set_config(config, "filter.late.clean", f"sh -c '{touch(marker, 'late')}; cat'")
    set_config(config, "include.path", str(tmp_path / "included"))
    (tmp_path / "included").write_text("[core]\n\tabbrev = 12\n")
    (ws.path / "notes.txt").write_text("changed\n")
    await store.create(ws)
    set_config(tmp_path / "included", "filter.inc.clean", f"sh -c '{touch(marker, 'inc')}; cat'")
    (ws.path / "app.py").write_text("x = 5\n")
    await store.create(ws)
    assert (await CommitGate().land(ws, SUMMARY)).committed
    assert fired(marker) == []
