"""Red team of 6eed76a: the first checkpoint written beside the first action (``create_below``,
``CheckpointUnderWay``) and the early scan that trusts the change journal (``lower_only``).

Real governed runs (bwrap, the worktree quota's overlay, real git, the scripted model of
test_redteam_more). Each test asserts the CORRECT behaviour: a failing test is a finding.
The early scan (task "first-checkpoint-scan") is held on conditions, never on sleeps.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from synthorg.domain import (
    ActionEvent,
    CancelEvent,
    CheckpointEvent,
    InterruptEvent,
    ObservationEvent,
)
from synthorg.sandbox.quota import unavailable_reason
from synthorg.service.boot import Components, boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.workspace.refs import checkpoint_ref

from .redteam_git_scripts import PLANS
from .redteam_support import create_planned
from .test_landing_from_overlay import _git, _repo, _scratch_tree, _settings
from .test_redteam_more import CURRENT, attack

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]

SCAN_TASK = "first-checkpoint-scan"


async def _until(cond: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Poll ``cond`` until true or the deadline; whether it became true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def _in_scan_task() -> bool:
    task = asyncio.current_task()
    return task is not None and task.get_name() == SCAN_TASK


def _hold_scan(monkeypatch: pytest.MonkeyPatch, until: Callable[[Path], bool]) -> list[bool]:
    """Hold the early scan's first ``git add -A`` until ``until(worktree)``."""
    from synthorg.workspace import snapshot

    real = snapshot.SnapshotIndex._add_everything_in
    held: list[bool] = []

    async def hold(self: snapshot.SnapshotIndex, root: Path, env: dict[str, str]) -> str:
        if _in_scan_task() and not held:
            held.append(await _until(lambda: until(self.ws.path)))
        return await real(self, root, env)

    monkeypatch.setattr(snapshot.SnapshotIndex, "_add_everything_in", hold)
    return held


def _worktree(tmp_path: Path, cid: str) -> Path:
    return next((tmp_path / "home" / "worktrees" / cid).iterdir())


def _tree(worktree: Path, rev: str) -> str:
    return _git(worktree, "rev-parse", f"{rev}^{{tree}}").strip()


def _show(worktree: Path, rev: str, path: str) -> str | None:
    out = subprocess.run(
        ["git", "show", f"{rev}:{path}"], cwd=worktree, capture_output=True, text=True
    )
    return out.stdout if out.returncode == 0 else None


def _ref_exists(worktree: Path, ref: str) -> bool:
    out = subprocess.run(
        ["git", "rev-parse", "-q", "--verify", ref], cwd=worktree, capture_output=True
    )
    return out.returncode == 0


async def _order(c: Components, cid: str) -> list[tuple[str, str | None, int | None]]:
    history = [s.event for s in await c.store.history(cid, limit=10_000)]
    return [
        (type(e).__name__, getattr(e, "action_id", None), getattr(e, "index", None))
        for e in history
        if isinstance(e, (CheckpointEvent, ActionEvent, ObservationEvent))
    ]


def _first_action(order: list[tuple[str, str | None, int | None]]) -> list[str]:
    action = next(a for kind, a, _ in order if kind == "ActionEvent")
    return [kind for kind, a, _ in order if a == action]


async def _edit_then_noop(
    tmp_path: Path,
) -> tuple[str, list[str], object, list[tuple[str, str | None, int | None]]]:
    """A run whose first action edits, deletes a dir, adds a file and then ``done``; its
    second does nothing. Its id, outputs, result and logged order."""
    repo = _repo(tmp_path)
    plan = [
        "cd /workspace && echo edited >> pkg/a.py && rm -rf dir && echo x > x.txt"
        " && echo d > done && echo ok",
        "cd /workspace && echo ok",
    ]
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(c, repo, plan)
        return cid, out, result, await _order(c, cid)


def _assert_base_then_edited(
    worktree: Path,
    tmp_path: Path,
    cid: str,
    result: object,
    order: list[tuple[str, str | None, int | None]],
) -> None:
    """Checkpoint 0 is the base tree; checkpoint 1 and the landing the tree after the
    first action, as a fresh index gives it; the log orders action, checkpoint, observation."""
    zero, one = checkpoint_ref(cid, 0), checkpoint_ref(cid, 1)
    assert _tree(worktree, zero) == _tree(worktree, f"{zero}^1"), "checkpoint 0 != base tree"
    final = _scratch_tree(worktree, tmp_path)
    assert _tree(worktree, one) == final, "checkpoint 1 != the tree after the first action"
    sha = getattr(result, "commit_sha", None)
    assert sha and _tree(worktree, sha) == final, result
    assert _first_action(order) == ["ActionEvent", "CheckpointEvent", "ObservationEvent"], order


# -- claim 1 and 4: checkpoint 0 is the tree before the first action; rollback restores it --


async def test_checkpoint_zero_and_rollback_hold_the_pre_action_tree(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first action edits, deletes, adds, chmods and symlinks while the early scan is held;
    checkpoint 0 must be the base tree, and rollback to it must restore that tree exactly
    (ignored files untouched)."""
    held = _hold_scan(monkeypatch, lambda ws: (ws / "done").exists())
    repo = _repo(tmp_path)
    plan = [
        "cd /workspace && echo edited >> pkg/a.py && rm top.txt && rm -rf dir && mkdir nd"
        " && echo n > nd/n && chmod +x pkg/b.py && ln -s pkg/a.py lnk && echo l > x.log"
        " && echo d > done && echo ok",
        "cd /workspace && echo more > y && echo ok",
    ]
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(c, repo, plan)
        order = await _order(c, cid)
        worktree = _worktree(tmp_path, cid)
        base = _tree(worktree, f"{checkpoint_ref(cid, 0)}^1")
        zero = _tree(worktree, checkpoint_ref(cid, 0))
        one = _tree(worktree, checkpoint_ref(cid, 1))
        await c.service.rollback(cid, 0, by="redteam")
        after_rollback = _scratch_tree(worktree, tmp_path)
    assert held == [True], (held, out, result)
    assert _first_action(order) == ["ActionEvent", "CheckpointEvent", "ObservationEvent"], order
    assert zero == base, "checkpoint 0 is not the tree before the first action"
    files_one = set(_git(worktree, "ls-tree", "-r", "--name-only", checkpoint_ref(cid, 1)).split())
    assert {"nd/n", "lnk", "done", "pkg/a.py"} <= files_one and "top.txt" not in files_one
    assert _show(worktree, checkpoint_ref(cid, 1), "pkg/a.py") == "a\nedited\n"
    assert one != zero
    assert after_rollback == base, "rollback to checkpoint 0 did not restore the base tree"
    assert (worktree / "x.log").exists()  # ignored: rollback leaves it


# -- claim 2: later checkpoints are the tree at their time --------------------------------


@pytest.mark.parametrize("during_scan", [True, False], ids=["during-early-scan", "after-scan"])
async def test_a_write_through_a_hard_link_is_in_the_next_checkpoint(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch, during_scan: bool
) -> None:
    """``ln pkg/a.py hl && echo changed >> hl`` changes pkg/a.py's content, but inotify
    reports the write only under hl's directory (a link's IN_ATTRIB goes to the inode, not
    to pkg/'s watch). The checkpoint before the next action must still hold pkg/a.py as
    changed. during-early-scan: the write happens while the early scan is held, so the early
    scan returns on the journal's word (``lower_only``) instead of re-reading the overlay;
    after-scan: the ordinary journal path (checkpoint 0 is taken by a no-op action first)."""
    link = "cd /workspace && ln pkg/a.py hl && echo changed >> hl && echo ok"
    noop = "cd /workspace && echo ok"
    if during_scan:
        held = _hold_scan(monkeypatch, lambda ws: (ws / "hl").exists())
        plan, n = [link, noop], 1
    else:
        held, plan, n = [True], [noop, link, noop], 2
    repo = _repo(tmp_path)
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(c, repo, plan)
    assert held == [True], (held, out, result)
    worktree = _worktree(tmp_path, cid)
    assert (worktree / "pkg" / "a.py").read_text() == "a\nchanged\n", out
    sha = getattr(result, "commit_sha", None)
    assert sha and _tree(worktree, sha) == _scratch_tree(worktree, tmp_path), result
    ref = checkpoint_ref(cid, n)
    assert _show(worktree, ref, "hl") == "a\nchanged\n"
    assert _show(worktree, ref, "pkg/a.py") == "a\nchanged\n", (
        f"checkpoint {n} holds a stale pkg/a.py (the journal named only hl)"
    )


@pytest.mark.parametrize("how", ["early-scan-fails"])
async def test_checkpoints_when_the_kept_lower_scan_is_missing(
    tmp_path: Path,
    quotas: Path,
    monkeypatch: pytest.MonkeyPatch,
    scan_roots: list[tuple[str, Path, str]],
    how: str,
) -> None:
    """No kept scan of the layer below: ``lower_snapshot`` takes its fallback (scans the
    lower layer into snapshot-below.index from a copy of an index that by now may hold the
    overlay's entries). early-scan-fails: the early scan raises once the action wrote.
    Checkpoint 0 must be the base tree, checkpoint 1 the tree after the first action, the
    landing the final tree. (A write before the journal watches makes no checkpoint of the
    layer below at all: ``test_a_write_before_the_journal_watches_is_in_checkpoint_0``.)"""
    from synthorg.workspace import snapshot

    done = lambda ws: (ws / "done").exists()  # noqa: E731
    held: list[bool] = []
    assert how == "early-scan-fails"
    real_add = snapshot.SnapshotIndex._add_everything_in

    async def fail(self: snapshot.SnapshotIndex, root: Path, env: dict[str, str]) -> str:
        if _in_scan_task():
            held.append(await _until(lambda: done(self.ws.path)))
            raise RuntimeError("redteam: the early scan fails")
        return await real_add(self, root, env)

    monkeypatch.setattr(snapshot.SnapshotIndex, "_add_everything_in", fail)
    cid, out, result, order = await _edit_then_noop(tmp_path)
    assert held == [True], (held, out, result)
    worktree = _worktree(tmp_path, cid)
    fallback = [r for name, r, task in scan_roots if task == "first-checkpoint"]
    assert fallback and all(r.name == "lower" for r in fallback), scan_roots
    _assert_base_then_edited(worktree, tmp_path, cid, result, order)


async def test_a_write_before_the_journal_watches_is_in_checkpoint_0(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something writes through the overlay before the early scan's journal watches (here
    the host, through the worktree's path, just before the journal starts): the journal
    cannot name that write, so the layer below is not the tree and the first action waits
    for the whole scan (read through the overlay) as before 6eed76a. Checkpoint 0 holds the
    early write and nothing of the action; no checkpoint is written beside it."""
    from synthorg.workspace import snapshot

    real_start = snapshot.SnapshotIndex._start_journal

    written: list[Path] = []

    async def write_first(self: snapshot.SnapshotIndex, *args: object) -> None:
        if not written:  # the run's first journal is its early scan's (a child task of it)
            written.append(self.ws.path / "early.txt")
            written[0].write_text("before the journal\n")
        await real_start(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshot.SnapshotIndex, "_start_journal", write_first)
    beside = _spy_log_checkpoint(monkeypatch)
    repo = _repo(tmp_path)
    plan = ["cd /workspace && echo x > x.txt && echo ok", "cd /workspace && echo ok"]
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, out, result = await attack(c, repo, plan)
        order = await _order(c, cid)
    assert getattr(result, "commit_sha", None), (out, result)
    assert beside == [], "a checkpoint was written beside the action"
    worktree = _worktree(tmp_path, cid)
    zero = checkpoint_ref(cid, 0)
    assert _show(worktree, zero, "early.txt") == "before the journal\n"
    assert _show(worktree, zero, "x.txt") is None
    assert _first_action(order) == ["ActionEvent", "CheckpointEvent", "ObservationEvent"], order


async def test_the_first_action_writes_before_the_journal_watches(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first action does not wait for the early scan's journal: here the journal's start
    is held until the action's last file exists. What it wrote before the watches landed is
    in the overlay's upper, which the journal takes in when it starts: checkpoint 0 is the
    base tree, checkpoint 1 (before the second action) and the landing the tree after the
    first action, each as a fresh index gives it."""
    from synthorg.workspace import snapshot

    real_start = snapshot.SnapshotIndex._start_journal
    held: list[bool] = []

    async def hold_start(self: snapshot.SnapshotIndex, *args: object) -> None:
        if not held:  # the run's first journal is its early scan's
            held.append(await _until(lambda: (self.ws.path / "done").exists()))
        await real_start(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshot.SnapshotIndex, "_start_journal", hold_start)
    cid, out, result, order = await _edit_then_noop(tmp_path)
    assert held == [True], (held, out, result)
    worktree = _worktree(tmp_path, cid)
    _assert_base_then_edited(worktree, tmp_path, cid, result, order)


# -- claim 3: the log and the first action's checkpoint under stops ------------------------


async def _start(c: Components, repo: Path, plan: list[str]) -> tuple[str, asyncio.Task[object]]:
    record, token = await create_planned(c, repo, "Red team")
    PLANS[token] = plan
    CURRENT.append(token)
    return record.id, asyncio.create_task(c.service.run(record.id))


def _spy_log_checkpoint(monkeypatch: pytest.MonkeyPatch) -> list[asyncio.Task[object]]:
    """The first-checkpoint task of each CheckpointUnderWay, once the engine waits for it
    (after the action returned or raised)."""
    from synthorg.engine.native import turn

    real = turn.TurnEngine._log_checkpoint
    seen: list[asyncio.Task[object]] = []

    async def spy(self: turn.TurnEngine, made: object) -> None:
        if isinstance(made, turn.CheckpointUnderWay):
            seen.append(made.task)  # type: ignore[arg-type]
        await real(self, made)  # type: ignore[arg-type]

    monkeypatch.setattr(turn.TurnEngine, "_log_checkpoint", spy)
    return seen


async def _logged_soon(
    c: Components, cid: str, kinds: tuple[type, ...], unless: asyncio.Task[None]
) -> bool:
    """Whether an event of ``kinds`` reaches the log within a minute (or ``unless`` ends)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while loop.time() < deadline and not unless.done():
        if any(isinstance(s.event, kinds) for s in await c.store.history(cid, limit=10_000)):
            return True
        await asyncio.sleep(0.02)
    return False


async def _stop(c: Components, cid: str, how: str) -> None:
    if how == "interrupt":
        await c.service.interrupt(cid, by="redteam")
    else:
        await c.service.cancel(cid, by="redteam")


async def _checks_after_stop(
    c: Components, tmp_path: Path, cid: str, waited: list[asyncio.Task[object]]
) -> tuple[list[tuple[str, str | None, int | None]], list[str], str]:
    """Let the background checkpoint task end; the log's order, the logged checkpoint refs
    that do not exist, and what became of the task."""
    fate = "no task"
    if waited:
        await asyncio.wait([waited[0]], timeout=120)
        task = waited[0]
        if not task.done():
            fate = "still running"
        elif task.cancelled():
            fate = "cancelled"
        elif task.exception() is not None:
            fate = f"raised {task.exception()!r}"
        else:
            fate = f"made {task.result()!r}"
    order = await _order(c, cid)
    worktree = _worktree(tmp_path, cid)
    history = [s.event for s in await c.store.history(cid, limit=10_000)]
    missing = [
        e.ref
        for e in history
        if isinstance(e, CheckpointEvent) and not _ref_exists(worktree, e.ref)
    ]
    return order, missing, fate


@pytest.mark.parametrize("how", ["interrupt", "cancel"])
async def test_a_stop_while_the_first_checkpoint_is_still_written(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The first action has returned; the engine waits for its checkpoint (the early scan
    is still running, held here) before logging its observation. To the person the action is
    still in flight (no observation yet), and they stop the run. The action's effect is in
    the worktree (applied at release); its checkpoint must be in the log, before the
    observation, and exist."""
    release = asyncio.Event()
    held = _hold_scan(monkeypatch, lambda ws: release.is_set())
    waited = _spy_log_checkpoint(monkeypatch)
    repo = _repo(tmp_path)
    plan = ["cd /workspace && echo x > x.txt && echo ok", "cd /workspace && echo ok"]
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, run = await _start(c, repo, plan)
        assert await _until(lambda: bool(waited) or run.done()), "the first action never ran"
        assert not run.done(), run.result()
        # The stop waits for the checkpoint it may not cut short: release the scan once
        # the stop is in the log, not before (nor at the hold's own deadline).
        stopping = asyncio.create_task(_stop(c, cid, how))
        assert await _logged_soon(c, cid, (InterruptEvent, CancelEvent), stopping)
        release.set()
        await asyncio.wait_for(stopping, timeout=120)
        result = await asyncio.wait_for(run, timeout=120)
        assert held == [True], "the scan was not held until the stop"
        order, missing, fate = await _checks_after_stop(c, tmp_path, cid, waited)
    worktree = _worktree(tmp_path, cid)
    zero = checkpoint_ref(cid, 0)
    facts = {
        "order": order,
        "background task": fate,
        "ref 0 exists (in the repo)": _ref_exists(repo, zero),
        "x.txt in worktree": (worktree / "x.txt").exists(),
        "worktree still a mount": worktree.is_mount(),
        "quota dirs left": sorted(str(p) for p in quotas.rglob("*.img")),
        "result": getattr(result, "termination_reason", result),
    }
    print("FACTS", facts)
    assert not missing, (missing, order)
    assert _first_action(order)[:2] == ["ActionEvent", "CheckpointEvent"], facts
    assert facts["x.txt in worktree"], ("the action's effect is not in the worktree", facts)
    assert _first_action(order).index("CheckpointEvent") < _first_action(order).index(
        "ObservationEvent"
    ), order


@pytest.mark.parametrize("how", ["interrupt", "cancel"])
async def test_a_stop_during_the_first_action(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The first action is still running (it wrote started.txt, then sleeps) when the run is
    stopped; the early scan is released once the engine waits for the checkpoint. The
    checkpoint must be logged before the action's observation, and exist, and be the base."""
    release = asyncio.Event()
    _hold_scan(monkeypatch, lambda ws: release.is_set())
    waited = _spy_log_checkpoint(monkeypatch)
    repo = _repo(tmp_path)
    plan = ["cd /workspace && echo s > started.txt && sleep 120 && echo x > x.txt", "true"]
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, run = await _start(c, repo, plan)
        started = await _until(
            lambda: (
                run.done()
                or any(
                    p.joinpath("started.txt").exists()
                    for p in (tmp_path / "home" / "worktrees").glob("*/*")
                )
            )
        )
        assert started and not run.done(), "the first action never started"
        stopping = asyncio.create_task(_stop(c, cid, how))
        assert await _until(lambda: bool(waited) or stopping.done())
        release.set()
        await asyncio.wait_for(stopping, timeout=120)
        result = await asyncio.wait_for(run, timeout=120)
        order, missing, fate = await _checks_after_stop(c, tmp_path, cid, waited)
    worktree = _worktree(tmp_path, cid)
    zero = checkpoint_ref(cid, 0)
    assert not missing, (missing, order)
    mine = _first_action(order)
    assert mine[:2] == ["ActionEvent", "CheckpointEvent"], (order, fate, result)
    assert "ObservationEvent" in mine and mine.index("CheckpointEvent") < mine.index(
        "ObservationEvent"
    ), order
    assert _tree(worktree, zero) == _tree(worktree, f"{zero}^1")


async def test_a_failed_first_checkpoint_ends_the_run_and_is_not_logged(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: writing checkpoint 0 of the layer below fails (as ``lower_snapshot``
    does with a ConflictError when the overlay is not live, or any git / host-limit error of
    its fallback scan). The action has run by then (that is the point of writing it beside
    the action; before 6eed76a a failed checkpoint stopped the run before its action). What
    holds: the run ends in error naming the failure, the log names no checkpoint and no
    checkpoint ref exists, and nothing lands (red team finding, decided in
    docs/architecture.md: the rule is that no checkpoint is claimed that was not made)."""
    from synthorg.domain import TerminationReason
    from synthorg.errors import ConflictError
    from synthorg.workspace.checkpoints import CheckpointStore

    _hold_scan(monkeypatch, lambda ws: (ws / "x.txt").exists())

    async def failing(self: CheckpointStore, *args: object, **kwargs: object) -> object:
        raise ConflictError("redteam: the layer below could not be snapshotted")

    monkeypatch.setattr(CheckpointStore, "create_below", failing)
    repo = _repo(tmp_path)
    plan = ["cd /workspace && echo x > x.txt && echo ok", "cd /workspace && echo ok"]
    async with boot(
        _settings(tmp_path), registry=default_registry(), provisioner=default_provisioner
    ) as c:
        cid, _, result = await attack(c, repo, plan)
        order = await _order(c, cid)
    worktree = _worktree(tmp_path, cid)
    assert getattr(result, "termination_reason", None) is TerminationReason.ERROR, result
    assert "could not be snapshotted" in str(getattr(result, "error", "")), result
    assert not getattr(result, "commit_sha", None), result
    assert "CheckpointEvent" not in [kind for kind, _, _ in order], order
    assert not _ref_exists(worktree, checkpoint_ref(cid, 0))
