"""Red team of 61b9c09/5d66633: the early scan reads the layer below the live overlay, and the
journal "takes in" the overlay's upper right after its watches (``snapshot._upper_paths``).

Claim under attack: index (= the lower layer) + journal (= upper entries at watch time +
every inotify event since) names every path where the merged view differs from the lower,
so every later checkpoint (and the landing) is exactly the merged tree.

Real governed runs (bwrap, the worktree quota's overlay, real git, the scripted model). The
early scan is held on conditions (a file the agent's command writes), never on sleeps. Each
test asserts the CORRECT behaviour: a failing test is a finding.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from synthorg.sandbox.quota import unavailable_reason
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.workspace.refs import checkpoint_ref
from tests.support import scripted_settings

from .test_landing_from_overlay import _git, _repo, _scratch_tree, _settings
from .test_redteam_deferred_checkpoint import _show, _tree, _until, _worktree
from .test_redteam_more import MODEL, SCRIPT, attack

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}"),
]


def _hold_journal(
    monkeypatch: pytest.MonkeyPatch,
    until: Callable[[Path], bool],
    after: Callable[[Path], None] | None = None,
) -> list[bool]:
    """Hold the run's first journal start (the early scan's) until ``until(worktree)``;
    ``after`` runs (blocking) once the watches are in place, before the upper is walked."""
    from synthorg.workspace import snapshot

    real = snapshot.SnapshotIndex._start_journal
    held: list[bool] = []

    async def hold(self: snapshot.SnapshotIndex, *args: Any) -> None:
        first = not held
        if first:
            held.append(await _until(lambda: until(self.ws.path)))
        await real(self, *args)
        if first and after is not None:
            after(self.ws.path)

    monkeypatch.setattr(snapshot.SnapshotIndex, "_start_journal", hold)
    return held


def _wait_blocking(cond: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _diff(worktree: Path, a: str, b: str) -> str:
    return _git(worktree, "diff-tree", "-r", "--name-status", a, b)


def _noted(monkeypatch: pytest.MonkeyPatch) -> list[set[str] | None]:
    """What the journal was told (``Journal.note``), in order."""
    from synthorg.workspace import journal

    seen: list[set[str] | None] = []
    real = journal.Journal.note

    def spy(self: journal.Journal, paths: set[str] | None, *args: Any) -> None:
        seen.append(None if paths is None else set(paths))
        real(self, paths, *args)

    monkeypatch.setattr(journal.Journal, "note", spy)
    return seen


async def _governed(
    tmp_path: Path, repo: Path, plan: list[str], settings: Any = None
) -> tuple[str, list[str], object, Path]:
    async with boot(
        settings or _settings(tmp_path), registry=default_registry(),
        provisioner=default_provisioner,
    ) as c:  # fmt: skip
        cid, out, result = await attack(c, repo, plan)
    return cid, out, result, _worktree(tmp_path, cid)


def _check_all(
    worktree: Path, tmp_path: Path, cid: str, result: object, out: list[str], last: int
) -> None:
    """Checkpoint 0 is the base; checkpoint ``last`` (before the final no-op action) and the
    landing are the final tree as a fresh index gives it."""
    final = _scratch_tree(worktree, tmp_path)
    zero = checkpoint_ref(cid, 0)
    assert _tree(worktree, zero) == _tree(worktree, f"{zero}^1"), "checkpoint 0 != base tree"
    ck = _tree(worktree, checkpoint_ref(cid, last))
    assert ck == final, (f"checkpoint {last} != scratch tree:\n{_diff(worktree, ck, final)}", out)
    sha = getattr(result, "commit_sha", None)
    assert sha, (result, out)
    landed = _tree(worktree, sha)
    assert landed == final, (f"landing != scratch tree:\n{_diff(worktree, landed, final)}", out)


def _facts(worktree: Path, tmp_path: Path, cid: str, result: object, last: int) -> dict[str, str]:
    final = _scratch_tree(worktree, tmp_path)
    ck = _tree(worktree, checkpoint_ref(cid, last))
    sha = getattr(result, "commit_sha", None)
    landed = _tree(worktree, sha) if sha else "(no landing)"
    return {
        f"checkpoint {last} vs scratch": _diff(worktree, ck, final) or "same",
        "landing vs scratch": "same"
        if landed == final
        else (_diff(worktree, landed, final) if sha else landed),
    }


# -- the first action writes everything before the journal watches -------------------------

PRE_WATCH = {
    "deletions": "rm top.txt && rm -rf dir && rm pkg/b.py && rm -rf old",
    "opaque-dir": "rm -rf swap && mkdir swap && echo s > swap/s && rm -rf dir && mkdir dir",
    "dir-rename": "mv dir dir2 && mv swap/keep swap/kept && mv pkg pkg2",
    "symlinks": "ln -s pkg/a.py lnk && rm -rf old && ln -s pkg old && rm top.txt"
    " && ln -s nowhere top.txt && rm -rf dir && ln -s / dir",
    "file-dir-swap": "rm top.txt && mkdir top.txt && echo i > top.txt/in && rm -rf dir"
    " && echo file > dir",
    "chmod": "chmod +x pkg/a.py && chmod 600 pkg/b.py && chmod -x pkg/a.py && chmod +x dir/y",
    "same-size-mtime": "cp -p pkg/a.py /tmp/ref && printf 'Z\\n' > pkg/a.py"
    " && touch -r /tmp/ref pkg/a.py && : > pkg/b.py && printf 'b\\n' > pkg/b.py"
    " && touch -r /tmp/ref pkg/b.py",
    "hardlinks": "ln top.txt hl && echo more >> hl && mkdir -p build && ln pkg/a.py build/hl2"
    " && echo z >> build/hl2 && ln dir/y dir/sub/y2",
    "odd-names": "touch -- -n --x && touch \"$(printf 'new\\nline')\""
    " && touch \"$(printf 'bad\\377name')\" && mkdir -- -d && echo d > ./-d/x"
    " && touch 'sp ace' '*' ':(glob)x' && mkdir \"$(printf 'd\\377')\""
    " && echo q > \"$(printf 'd\\377')/q\"",
    "gitignore": "printf 'build/\\n' > .gitignore && echo x > run.log",
    "nested-git-no-head": "mkdir -p pkg/.git && echo c > pkg/.git/config && echo e >> pkg/a.py",
    "write-then-delete": "echo t > tmp1 && rm tmp1 && mkdir td && echo x > td/x && rm -rf td"
    " && echo e >> pkg/a.py && rm pkg/b.py && echo b2 > pkg/b.py && rm -rf dir"
    " && mkdir -p dir/sub && echo x > dir/sub/x",
}


@pytest.mark.parametrize("case", sorted(PRE_WATCH))
async def test_writes_before_the_watches_are_in_every_later_checkpoint(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Action 1 writes while the early scan's journal is held (so only the upper walk can
    name its writes); checkpoint 0 must be the base, checkpoint 1 (before the no-op action
    2) and the landing the tree as a fresh ``git add -A`` gives it."""
    held = _hold_journal(monkeypatch, lambda ws: (ws / "done").exists())
    noted = _noted(monkeypatch)
    repo = _repo(tmp_path)
    plan = [
        f"cd /workspace && {PRE_WATCH[case]} && echo d > done && echo ok",
        "cd /workspace && echo ok",
    ]
    cid, out, result, worktree = await _governed(tmp_path, repo, plan)
    assert held == [True], (held, out, result)
    assert all("[exit code: 0]" in o for o in out), out
    if case == "nested-git-no-head":  # a nested .git: the next checkpoint scans everything
        assert noted and noted[0] is None, noted
    else:
        assert noted and noted[0] is not None and "done" in noted[0], noted
    _check_all(worktree, tmp_path, cid, result, out, last=1)


@pytest.mark.parametrize("before_watches", [True, False], ids=["before-watches", "after-scan"])
async def test_a_half_made_nested_repository_before_the_watches(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch, before_watches: bool
) -> None:
    """The agent writes ``sub/.git/HEAD`` (a nested repository with no commit) before the
    watches. git refuses ``add -A`` of such a tree ("'sub/' does not have a commit checked
    out"), so no tree is exactly right; what must hold is that the run ends with a result
    (an error it reports, or a landing), not an exception out of ``service.run``, and that
    whatever it logged as checkpoints exists."""
    held = _hold_journal(monkeypatch, lambda ws: (ws / "done").exists() or not before_watches)
    repo = _repo(tmp_path)
    plan = [
        *([] if before_watches else ["cd /workspace && echo ok"]),
        "cd /workspace && mkdir -p sub/.git && printf 'ref: refs/heads/main\\n' > sub/.git/HEAD"
        " && echo f > sub/f && echo e >> pkg/a.py && echo d > done && echo ok",
        "cd /workspace && echo ok",
    ]
    raised: BaseException | None = None
    try:
        _, out, result, _ = await _governed(tmp_path, repo, plan)
    except Exception as exc:
        raised = exc
    assert held == [True], held
    assert raised is None, f"service.run raised {type(raised).__name__}: {str(raised)[-300:]}"
    assert getattr(result, "termination_reason", None) is not None, (result, out)


# -- writes after the watches, before the upper is walked ----------------------------------


async def test_writes_between_the_watches_and_the_upper_walk(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal watches; before the upper is walked the agent edits, deletes and makes
    new directories (so each is both an event and an upper entry); then action 2 writes in
    the new directories (watched only once a drain saw their IN_CREATE)."""

    def gate(ws: Path) -> None:
        (ws / "go.log").write_text("go\n")  # ignored (*.log): the agent's signal
        assert _wait_blocking(lambda: (ws / "done").exists())

    held = _hold_journal(monkeypatch, lambda ws: (ws / "started").exists(), after=gate)
    repo = _repo(tmp_path)
    plan = [
        "cd /workspace && echo s > started && while [ ! -e go.log ]; do sleep 0.02; done"
        " && echo e >> pkg/a.py && rm -rf dir && mkdir nd && echo n > nd/n && rm top.txt"
        " && rm -rf swap && mkdir swap && echo s > swap/s && echo d > done && echo ok",
        "cd /workspace && echo q > nd/q && echo t > swap/t && mkdir -p nd/deep"
        " && echo x > nd/deep/x && echo ok",
        "cd /workspace && echo ok",
    ]
    cid, out, result, worktree = await _governed(tmp_path, repo, plan)
    assert held == [True], (held, out, result)
    _check_all(worktree, tmp_path, cid, result, out, last=2)


async def test_a_directory_made_while_the_watches_are_placed(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Journal._watch_tree`` lists a directory (os.walk's scandir) before it watches it: a
    directory the agent makes in that window is neither walked nor reported. The upper walk
    names it to the next checkpoint, but nothing ever watches it: a file written in it
    later must still be in the checkpoint after. (The window is held open here on the
    root's watch; an agent spinning ``mkdir`` hits it by chance.)"""
    from synthorg.workspace import journal

    real_libc = journal._LIBC
    assert real_libc is not None
    state: dict[str, Any] = {"armed": False, "fired": False}

    class SlowLibc:
        def inotify_init1(self, flags: int) -> int:
            return real_libc.inotify_init1(flags)

        def inotify_add_watch(self, fd: int, path: bytes, mask: int) -> int:
            if state["armed"] and not state["fired"]:
                state["fired"] = True  # the root: os.walk has listed it already
                ws = Path(os.fsdecode(path))
                (ws / "go.log").write_text("go\n")
                state["made"] = _wait_blocking(lambda: (ws / "done").exists())
            return real_libc.inotify_add_watch(fd, path, mask)

    monkeypatch.setattr(journal, "_LIBC", SlowLibc())

    def arm(ws: Path) -> bool:
        if (ws / "started").exists():
            state["armed"] = True
            return True
        return False

    held = _hold_journal(monkeypatch, arm)
    repo = _repo(tmp_path)
    plan = [
        "cd /workspace && echo s > started && while [ ! -e go.log ]; do sleep 0.02; done"
        " && mkdir late && echo f > late/f && echo d > done && echo ok",
        "cd /workspace && echo g > late/g && echo ok",
        "cd /workspace && echo ok",
    ]
    cid, out, result, worktree = await _governed(tmp_path, repo, plan)
    assert held == [True] and state.get("made"), (held, state, out, result)
    facts = _facts(worktree, tmp_path, cid, result, last=2)
    print("FACTS", facts)
    assert _show(worktree, checkpoint_ref(cid, 1), "late/f") == "f\n", facts
    assert _show(worktree, checkpoint_ref(cid, 2), "late/g") == "g\n", (
        "checkpoint 2 misses late/g: late/ was made between os.walk's listing of its parent"
        " and the parent's watch, so it was never watched",
        facts,
    )
    _check_all(worktree, tmp_path, cid, result, out, last=2)


# -- many entries before the watches --------------------------------------------------------


async def test_more_than_20000_entries_before_the_watches(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past 20,000 upper entries the journal says 'everything': the next checkpoint must
    scan the overlay (not trust the index of the lower) and hold every file."""
    held = _hold_journal(monkeypatch, lambda ws: (ws / "done").exists())
    noted = _noted(monkeypatch)
    repo = _repo(tmp_path)
    plan = [
        "cd /workspace && mkdir many && (cd many && seq 1 20500 | xargs touch)"
        " && rm top.txt && rm -rf dir && echo e >> pkg/a.py && echo d > done && echo ok",
        "cd /workspace && echo ok",
    ]
    settings = scripted_settings(
        tmp_path / "home", SCRIPT, model=MODEL, sandbox={"limits": {"disk_bytes": 256 << 20}}
    )
    cid, out, result, worktree = await _governed(tmp_path, repo, plan, settings)
    assert held == [True], (held, out, result)
    assert noted and noted[0] is None, [None if n is None else len(n) for n in noted]
    _check_all(worktree, tmp_path, cid, result, out, last=1)
    files = _git(worktree, "ls-tree", "-r", "--name-only", checkpoint_ref(cid, 1)).split("\n")
    assert sum(1 for f in files if f.startswith("many/")) == 20500


# -- a hard link into a directory the journal does not watch ---------------------------------


async def test_a_hard_link_into_an_unwatched_ignored_directory(
    tmp_path: Path, quotas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big tree (>= 2,000 entries): wholly ignored directories are not watched. Before the
    watches the agent makes build/ (ignored) and hard-links pkg/a.py into it (the upper walk
    names both; checkpoint 1 scans all, nlink 2). After, it appends through build/hl: pkg/
    a.py's content changes, and the only event would be in build/, which nothing watches.
    Checkpoint 2 must hold the new pkg/a.py."""
    held = _hold_journal(monkeypatch, lambda ws: (ws / "done").exists())
    repo = _repo(tmp_path)
    bulk = repo / "bulk"
    bulk.mkdir()
    for i in range(2100):
        (bulk / f"f{i:04}").write_text(f"{i}\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "bulk")
    plan = [
        "cd /workspace && mkdir -p build && ln pkg/a.py build/hl && echo d > done && echo ok",
        "cd /workspace && echo changed >> build/hl && echo ok",
        "cd /workspace && echo ok",
    ]
    cid, out, result, worktree = await _governed(tmp_path, repo, plan)
    assert held == [True], (held, out, result)
    assert (worktree / "pkg" / "a.py").read_text() == "a\nchanged\n", out
    facts = _facts(worktree, tmp_path, cid, result, last=2)
    print("FACTS", facts)
    assert _show(worktree, checkpoint_ref(cid, 2), "pkg/a.py") == "a\nchanged\n", (
        "checkpoint 2 holds a stale pkg/a.py: the write went through build/hl, in a wholly"
        " ignored (unwatched) directory",
        facts,
    )
    _check_all(worktree, tmp_path, cid, result, out, last=2)


# -- _upper_paths itself: what it reads and what it costs -----------------------------------


def test_upper_paths_follows_no_symlink_and_is_bounded(tmp_path: Path) -> None:
    """The walk of the upper must not follow a symlink the agent made (to / or to the host
    tree), must stop at its bound in one huge directory, and must give up (None) on a
    nesting deeper than a path can name rather than return a partial set."""
    from synthorg.workspace.snapshot import _MAX_UPPER_PATHS, _upper_paths

    upper = tmp_path / "upper"
    (upper / "d").mkdir(parents=True)
    (upper / "d" / "root").symlink_to("/")
    (upper / "host").symlink_to(tmp_path)
    (upper / ".git").mkdir()
    (upper / ".git" / "x").write_text("x")
    (upper / "sub" / ".git").mkdir(parents=True)
    name = os.fsdecode(b"bad\xffname")
    (upper / name).write_text("x")
    # A nested repository: named one by one git would add its files as plain ones, so the
    # walk gives up and the next checkpoint scans everything (which refuses it).
    assert _upper_paths(upper) == (None, set())
    (upper / "sub" / ".git").rmdir()
    assert _upper_paths(upper) == ({"d", "d/root", "host", "sub", name}, {"d", "sub"})

    huge = tmp_path / "huge"
    huge.mkdir()
    for i in range(_MAX_UPPER_PATHS + 50):
        (huge / f"{i}").touch()
    started = time.monotonic()
    assert _upper_paths(huge)[0] is None
    assert time.monotonic() - started < 5

    deep = tmp_path / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(2100):  # 2 chars per level: past PATH_MAX (4096) by absolute path
            os.mkdir("d", dir_fd=fd)
            new = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = new
        os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    got, _ = _upper_paths(deep)
    assert got is None or any(p.endswith("/leaf") for p in got), (
        "a partial set of a deep upper (the leaf left out) would pass for all of it"
    )
    # leave nothing pytest's tmp cleanup cannot remove by path
    subprocess.run(["rm", "-rf", str(deep)], check=False)
