"""Red team, round 3: the landing's tree edited in-process (a9c18a9: ``SnapshotIndex.
_landing_tree`` -> ``objects.entries_under`` / ``_added_alone`` / ``objects.edit_tree``) and
the checkout's own index vouched for after the run's first checkpoint (c5c2325:
``own_index.vouch`` / ``own_index.holds``).

Each test makes the overlay's record by hand, as sandbox/upper.py would name the paths of
what a run did (see test_landing_from_overlay_property.py), and asserts the safe outcome:
the landed tree is exactly what a full scan of the final worktree gives (``git add -A`` into
a fresh index seeded with HEAD, then ``git write-tree``), the gate refuses what that scan
would make it refuse, and ``git status`` never hides a change. A test that fails here is an
attack that worked.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synthorg import overlaylog
from synthorg.workspace import own_index, snapshot, views
from synthorg.workspace.checkout import Checkout
from synthorg.workspace.checkpoints import CheckpointStore
from synthorg.workspace.errors import NestedRepositoryError, OversizeFileError
from synthorg.workspace.gate import CommitGate
from synthorg.workspace.hostlimits import HostLimits
from synthorg.workspace.models import GateSummary, Workspace
from synthorg.workspace.snapshot import Snapshot
from synthorg.workspace.worktrees import WorktreeManager

from .gitfixtures import git, make_repo
from .test_landing_from_overlay_property import _entries

SUMMARY = GateSummary(
    task_id="task-rt3",
    title="Red team round 3",
    conversation_id="conv-rt3",
    loop_type="react",
    turns=1,
    cost_usd=Decimal("0"),
)


# --------------------------------------------------------------------------- helpers


def _run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **(env or {})}, check=True,
        capture_output=True, text=True,
    ).stdout  # fmt: skip


def _scratch_tree(worktree: Path, index: Path) -> str:
    """What a full scan gives: a fresh index seeded with HEAD, ``git add -A``, write-tree."""
    index.unlink(missing_ok=True)
    env = {"GIT_INDEX_FILE": str(index)}
    _run(worktree, "read-tree", "HEAD", env=env)
    _run(worktree, "add", "-A", env=env)
    return _run(worktree, "write-tree", env=env).strip()


def _diff(worktree: Path, a: str, b: str) -> str:
    return _run(worktree, "diff-tree", "-r", "--raw", a, b)


async def _worktree(tmp: Path, repo: Path, name: str = "conv-rt3") -> Workspace:
    return await WorktreeManager(tmp / "home").create(repo, name)


async def _first_scan(ws: Workspace, tmp: Path, token: str = "token-rt3") -> None:
    """The run's first checkpoint, under an overlay that has changed nothing yet (its lower
    read at the worktree's own path, as the property test does)."""
    upper = tmp / f"upper-{token}"
    upper.mkdir()
    overlaylog.mounted(ws.path, token, upper=upper, lower=ws.path)
    await CheckpointStore().create(ws)


async def _landing(
    ws: Workspace, changed: set[str], token: str = "token-rt3", limits: HostLimits | None = None
) -> Snapshot:
    """The release with the record ``changed``, and the NO_OP check's scan that lands it."""
    overlaylog.released(ws.path, token, frozenset(changed))
    snap, _ = await views.scan_changes(ws, limits, overlay=True)
    return snap


def _assert_full_scan(ws: Workspace, tmp: Path, snap: Snapshot) -> None:
    expected = _scratch_tree(ws.path, tmp / "scratch.index")
    assert snap.tree == expected, (
        f"landed tree differs from a full scan (from_overlay={snap.from_overlay}):\n"
        f"{_diff(ws.path, expected, snap.tree)}"
    )


def _mktree(repo: Path, lines: list[str]) -> str:
    return subprocess.run(
        ["git", "mktree", "-z"], cwd=repo, input="".join(f"{line}\0" for line in lines),
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def _blob(repo: Path, data: bytes) -> str:
    return subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=repo, input=data, check=True,
        capture_output=True,
    ).stdout.decode().strip()  # fmt: skip


def _commit_tree(repo: Path, tree: str, message: str) -> None:
    parent = _run(repo, "rev-parse", "HEAD").strip()
    sha = _run(repo, "commit-tree", tree, "-p", parent, "-m", message).strip()
    _run(repo, "update-ref", "HEAD", sha)
    _run(repo, "reset", "-q", "--hard", "HEAD")


# ------------------------------------------------- attack 1: gitlinks (submodules, nested)


def _commit_ignored(repo: Path, rels: tuple[str, ...], text: str) -> None:
    """Files the repository's .gitignore ignores, tracked all the same (``add -f``)."""
    for rel in rels:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
        git(repo, "add", "-f", rel)
    git(repo, "commit", "-q", "-m", "tracked though ignored")


def _repo_with_submodule(tmp: Path) -> Path:
    """A repository whose HEAD holds a gitlink ``sub`` (a submodule, never initialised in
    a worktree: git leaves an empty directory there)."""
    repo = tmp / "proj"
    make_repo(repo, {"a.txt": b"a\n", "lib/x.txt": b"x\n"})
    target = _run(repo, "rev-parse", "HEAD").strip()
    (repo / ".gitmodules").write_text('[submodule "sub"]\n\tpath = sub\n\turl = ./nowhere\n')
    _run(repo, "add", ".gitmodules")
    _run(repo, "update-index", "--add", "--cacheinfo", f"160000,{target},sub")
    _run(repo, "update-index", "--add", "--cacheinfo", f"160000,{target},lib/deep")
    _run(repo, "commit", "-q", "-m", "submodules")
    return repo


async def test_a_file_written_into_an_uninitialised_submodule(tmp_path: Path) -> None:
    """The worktree's ``sub`` is an empty directory standing for a gitlink. A full scan
    keeps the gitlink and adds nothing inside it. The agent writes ``sub/evil.txt``: the
    upper names only that path (``sub`` is a lower dir, copied up, not new)."""
    repo = _repo_with_submodule(tmp_path)
    ws = await _worktree(tmp_path, repo)
    assert (ws.path / "sub").is_dir()
    await _first_scan(ws, tmp_path)
    (ws.path / "sub/evil.txt").write_text("inside a submodule\n")
    (ws.path / "lib/deep/evil.txt").write_text("inside a deeper submodule\n")
    snap = await _landing(ws, {"sub/evil.txt", "lib/deep/evil.txt"})
    _assert_full_scan(ws, tmp_path, snap)


async def test_the_gate_never_lands_a_submodule_replaced_by_a_directory(tmp_path: Path) -> None:
    """End to end: the gate lands what a full scan has, so the submodule ``sub`` stays a
    gitlink in HEAD (a full scan finds no change at all here)."""
    repo = _repo_with_submodule(tmp_path)
    ws = await _worktree(tmp_path, repo)
    await _first_scan(ws, tmp_path)
    (ws.path / "sub/evil.txt").write_text("inside a submodule\n")
    snap = await _landing(ws, {"sub/evil.txt"})
    result = await CommitGate("Gate Bot", "gate@example.test").land(ws, SUMMARY, scanned=snap)
    assert not result.committed, (result.files, result.reason)
    assert _run(ws.path, "ls-tree", "HEAD", "sub").split()[:2] == ["160000", "commit"]


async def test_a_file_written_into_an_initialised_nested_repository(tmp_path: Path) -> None:
    """A repository nested in the worktree (the user's clone, not ignored), already a gitlink
    in the private index from an earlier scan (so the run's first scan warns of nothing and
    is kept). The agent edits a file inside it: a full scan has the gitlink (the nested
    repo's HEAD), and the gate refuses it as a nested repository."""
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n"})
    ws = await _worktree(tmp_path, repo)
    nested = ws.path / "vendor/lib"
    make_repo(nested, {"src.c": b"int x;\n"})
    await CheckpointStore().create(ws)  # a checkpoint before the run: the gitlink is indexed
    snapshot.forget(ws)  # the run's overlay: a journal started before it sees nothing
    await _first_scan(ws, tmp_path)
    (nested / "src.c").write_text("int y;\n")
    (nested / "new.c").write_text("int z;\n")
    (ws.path / "a.txt").write_text("and a real change\n")
    snap = await _landing(ws, {"vendor/lib/src.c", "vendor/lib/new.c", "a.txt"})
    _assert_full_scan(ws, tmp_path, snap)
    with pytest.raises(NestedRepositoryError):
        await CommitGate("Gate Bot", "gate@example.test").land(ws, SUMMARY, scanned=snap)


async def test_a_submodule_replaced_by_a_file_and_a_dir(tmp_path: Path) -> None:
    """The gitlink's own path changed (a file there, then a directory): the seed carries the
    gitlink, git add replaces it; regression for the path itself."""
    repo = _repo_with_submodule(tmp_path)
    ws = await _worktree(tmp_path, repo)
    await _first_scan(ws, tmp_path)
    (ws.path / "sub").rmdir()
    (ws.path / "sub").write_text("a file now\n")
    shutil.rmtree(ws.path / "lib/deep")
    (ws.path / "lib/deep").mkdir()
    (ws.path / "lib/deep/f.txt").write_text("f\n")
    snap = await _landing(ws, {"sub", "lib/deep", "lib/deep/f.txt"})
    _assert_full_scan(ws, tmp_path, snap)


# ------------------------------------------- attack 2: what libgit2 writes vs git write-tree


async def test_a_non_canonical_mode_beside_an_edited_file(tmp_path: Path) -> None:
    """HEAD's tree holds a blob of mode 100664 (old git wrote those; read-tree/checkout keep
    the tree's id in the cache-tree). A directory git rewrites from an index gets 100644;
    libgit2's tree builder, seeded from the old tree, may keep the raw mode."""
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n"})
    odd = _blob(repo, b"group writable\n")
    plain = _blob(repo, b"sibling\n")
    tool = _blob(repo, b"#!/bin/sh\n")
    sub = _mktree(repo, [f"100664 blob {odd}\todd.txt", f"100644 blob {plain}\tsib.txt",
                         f"100775 blob {tool}\ttool.sh"])  # fmt: skip
    untouched = _mktree(repo, [f"100664 blob {odd}\todd.txt", f"100775 blob {tool}\ttool.sh"])
    root = _mktree(repo, [f"100644 blob {_blob(repo, b'a' + bytes([10]))}\ta.txt",
                          f"040000 tree {sub}\td", f"040000 tree {untouched}\te"])  # fmt: skip
    raw = subprocess.run(["git", "cat-file", "tree", sub], cwd=repo, check=True,
                         capture_output=True).stdout  # fmt: skip
    assert b"100664 odd.txt" in raw and b"100775 tool.sh" in raw  # kept as written
    _commit_tree(repo, root, "odd modes")
    ws = await _worktree(tmp_path, repo)
    await _first_scan(ws, tmp_path)
    (ws.path / "d/sib.txt").write_text("sibling edited\n")
    snap = await _landing(ws, {"d/sib.txt"})
    assert snap.from_overlay
    _assert_full_scan(ws, tmp_path, snap)


NAMES = ["a", "a-b", "a.b", "a0", "a b", "a\tt", "-lead", "back\\slash", "new\nline",
         "\u00fcn\u00efc\u00f6de", "e\u0301", "\u4e2d", "x" * 200, "[ab]", "*", ":(glob)x",
         "Readme", "README"]  # fmt: skip


def _base_files() -> dict[str, bytes]:
    files: dict[str, bytes] = {".gitignore": b"*.log\n"}
    for i, name in enumerate(NAMES):
        files[f"{name}/in.txt" if i % 2 else name] = f"{i}\n".encode()
        files[f"dir/{name}"] = f"d{i}\n".encode()
    return files


NAME_OPS = ("write", "delete", "to_dir", "to_file", "symlink", "mkdir_empty")


def _name_op(root: Path, op: str, rel: str) -> set[str]:
    """One change as a run could make it; the paths the upper would name."""
    path = root / rel
    if op == "delete":
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
        return {rel}
    made = {rel}
    for parent in reversed(path.relative_to(root).parents[:-1]):
        at = root / parent
        if os.path.lexists(at) and (at.is_symlink() or not at.is_dir()):
            at.unlink()  # a file (or link) where a directory is wanted: replaced
        if not at.is_dir():
            at.mkdir()
            made.add(str(parent))  # a new directory is in the upper whole
    here = os.path.lexists(path)
    isdir = path.is_dir() and not path.is_symlink()
    if isdir:
        shutil.rmtree(path)
    elif here:
        path.unlink()
    if op == "write":
        path.write_bytes(b"written\n")
        return made
    if op == "symlink":
        path.symlink_to("a")
        return made
    path.mkdir()
    if op == "to_dir":
        (path / "made.txt").write_bytes(b"made\n")
        (path / "made.log").write_bytes(b"ignored\n")
        return made | {f"{rel}/made.txt", f"{rel}/made.log"}
    if op == "to_file":
        path.rmdir()
        path.write_bytes(b"a file now\n")
        return made
    return made  # mkdir_empty: an empty directory (no tree entry)


async def _names_case(tmp: Path, changes: list[tuple[str, str]]) -> tuple[str, str, bool]:
    repo = tmp / "proj"
    make_repo(repo, _base_files())
    ws = await _worktree(tmp, repo)
    await _first_scan(ws, tmp)
    lower = _entries(ws.path)
    touched: set[str] = set()
    for op, rel in changes:
        touched |= _name_op(ws.path, op, rel)
    # What the upper names: every touched path still there, a whiteout for each one the
    # layer had; a path made and deleted again (or never made) leaves nothing.
    named = {p for p in touched if os.path.lexists(ws.path / p) or p in lower}
    snap = await _landing(ws, named)
    return snap.tree, _scratch_tree(ws.path, tmp / "scratch.index"), snap.from_overlay


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(NAME_OPS),
            st.sampled_from(NAMES).flatmap(
                lambda n: st.sampled_from([n, f"dir/{n}", f"{n}/in.txt", f"deep/{n}/x/{n}"])
            ),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_names_next_to_slash_in_sort_order_and_odd_characters(
    changes: list[tuple[str, str]],
) -> None:
    """``a``, ``a-b``, ``a.b``, ``a/``: '-' and '.' sort before '/', ``a0`` after it (git's
    tree order sorts a directory as ``name/``); names with spaces, tabs, newlines,
    backslashes, a leading dash, pathspec magic, unicode (NFC and NFD), case twins."""
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        tree, expected, from_overlay = asyncio.run(_names_case(tmp, changes))
    assert tree == expected, changes
    assert from_overlay, changes


SWAPS: list[tuple[str, list[tuple[str, str]]]] = [
    ("file to dir at depth 3", [("to_dir", "deep/a/x/a")]),
    ("dir to file at depth 1", [("to_file", "a b")]),
    ("dir to symlink", [("symlink", "a-b")]),
    ("empty dir where a dir was", [("mkdir_empty", "a.b/in.txt"), ("mkdir_empty", "a-b")]),
    ("a, a.b, a/b together", [("to_dir", "a"), ("write", "a.b"), ("write", "a-b/in.txt")]),
    ("case twins", [("delete", "Readme"), ("write", "README"), ("write", "readme")]),
    ("magic names", [("write", "*"), ("write", "[ab]"), ("delete", ":(glob)x")]),
]


@pytest.mark.parametrize(("why", "changes"), SWAPS, ids=[s[0] for s in SWAPS])
async def test_swaps_and_names(tmp_path: Path, why: str, changes: list[tuple[str, str]]) -> None:
    tree, expected, from_overlay = await _names_case(tmp_path, changes)
    assert from_overlay, why
    assert tree == expected, why


@pytest.mark.parametrize("parent", ["a file", "a symlink"])
async def test_a_record_naming_a_path_under_an_unchanged_file(tmp_path: Path, parent: str) -> None:
    """A record naming ``f/x.txt`` where ``f`` is a file (or a symlink) both in the scan and
    now, and is not named itself: nothing is there to drop. (sandbox/upper.py names the
    parent too whenever a directory replaced it; this is edit_tree's own contract: "what
    git write-tree gives for an index of base edited so", which for git rm --cached
    --ignore-unmatch f/x.txt is the base unchanged.)"""
    repo = tmp_path / "proj"
    make_repo(repo, {"f": b"a file\n", "d/y.txt": b"y\n"})
    if parent == "a symlink":
        (repo / "f").unlink()
        (repo / "f").symlink_to("d")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "f is a link")
    ws = await _worktree(tmp_path, repo)
    await _first_scan(ws, tmp_path)
    (ws.path / "d/y.txt").write_text("edited\n")
    snap = await _landing(ws, {"f/x.txt", "d/y.txt"})
    _assert_full_scan(ws, tmp_path, snap)


async def test_a_changed_path_under_what_is_now_a_symlink(tmp_path: Path) -> None:
    """A record that names ``d`` (now a symlink to a directory holding ``x.txt``) and
    ``d/x.txt`` too: git must not add through the link, the landing must equal a scan."""
    repo = tmp_path / "proj"
    make_repo(repo, {"d/x.txt": b"x\n", "e/x.txt": b"e\n", "a.txt": b"a\n"})
    ws = await _worktree(tmp_path, repo)
    await _first_scan(ws, tmp_path)
    shutil.rmtree(ws.path / "d")
    (ws.path / "d").symlink_to("e")
    snap = await _landing(ws, {"d", "d/x.txt"})
    _assert_full_scan(ws, tmp_path, snap)


async def test_a_tracked_ignored_file_in_a_replaced_directory(tmp_path: Path) -> None:
    """``d`` replaced whole (opaque) and rebuilt with its tracked-though-ignored file
    edited and a new ignored one; and ``e``'s tracked-ignored file deleted with ``e``."""
    repo = tmp_path / "proj"
    make_repo(repo, {".gitignore": b"*.log\n", "d/x.txt": b"x\n", "e/y.txt": b"y\n"})
    _commit_ignored(repo, ("d/kept.log", "e/kept.log", "d/sub/kept.log"), "kept\n")
    ws = await _worktree(tmp_path, repo)
    await _first_scan(ws, tmp_path)
    shutil.rmtree(ws.path / "d")
    (ws.path / "d/sub").mkdir(parents=True)
    (ws.path / "d/kept.log").write_text("edited\n")
    (ws.path / "d/sub/kept.log").write_text("kept\n")
    (ws.path / "d/new.log").write_text("new, ignored\n")
    shutil.rmtree(ws.path / "e")
    snap = await _landing(ws, {"d", "d/kept.log", "d/sub", "d/sub/kept.log", "d/new.log", "e"})
    assert snap.from_overlay
    _assert_full_scan(ws, tmp_path, snap)


async def test_very_many_changed_paths_at_the_limit(tmp_path: Path) -> None:
    """20,000 changed paths (the most the record may stand in for), in new and old dirs."""
    repo = tmp_path / "proj"
    make_repo(repo, {f"old{i}/f.txt": b"o\n" for i in range(50)})
    ws = await _worktree(tmp_path, repo)
    await _first_scan(ws, tmp_path)
    changed: set[str] = set()
    for i in range(50):
        shutil.rmtree(ws.path / f"old{i}")
        changed.add(f"old{i}")
    for d in range(100):
        (ws.path / f"n{d}").mkdir()
        changed.add(f"n{d}")
        for f in range(198):
            (ws.path / f"n{d}/f{f}").write_bytes(b"%d\n" % f)
            changed.add(f"n{d}/f{f}")
    assert len(changed) == 19_950
    while len(changed) < 20_000:
        changed.add(f"gone{len(changed)}")
    snap = await _landing(ws, changed)
    assert snap.from_overlay
    _assert_full_scan(ws, tmp_path, snap)


# ----------------------------------------------------- attack 3: oversize in changed paths


@pytest.mark.parametrize(
    "where",
    ["replaces a tracked file", "in a new dir", "in a replaced dir", "beside magic names"],
)
async def test_an_oversize_file_in_a_changed_path_is_refused(tmp_path: Path, where: str) -> None:
    repo = tmp_path / "proj"
    make_repo(repo, {".gitignore": b"*.log\n", "big.bin": b"small\n", "d/x.txt": b"x\n",
                     "a.txt": b"a\n", "b.txt": b"b\n"})  # fmt: skip
    ws = await _worktree(tmp_path, repo)
    await _first_scan(ws, tmp_path)
    big = b"\0" * 4096
    if where == "replaces a tracked file":
        (ws.path / "big.bin").write_bytes(big)
        changed = {"big.bin"}
    elif where == "in a new dir":
        (ws.path / "n/m").mkdir(parents=True)
        (ws.path / "n/m/big.bin").write_bytes(big)
        changed = {"n", "n/m", "n/m/big.bin"}
    elif where == "in a replaced dir":
        shutil.rmtree(ws.path / "d")
        (ws.path / "d").mkdir()
        (ws.path / "d/x.txt").write_bytes(big)
        changed = {"d", "d/x.txt"}
    else:
        (ws.path / "*").write_bytes(b"star\n")
        (ws.path / ":(exclude)a.txt").write_bytes(b"magic\n")
        (ws.path / "[ab].txt").write_bytes(big)
        changed = {"*", ":(exclude)a.txt", "[ab].txt"}
    limits = HostLimits(max_file_bytes=1024)
    snap = await _landing(ws, changed, limits=limits)
    assert snap.unhashed, (where, snap)
    gate = CommitGate("Gate Bot", "gate@example.test", max_file_bytes=1024)
    with pytest.raises(OversizeFileError):
        await gate.land(ws, SUMMARY, scanned=snap)
    if where == "beside magic names":  # the rest of the landing was still a literal add
        listed = _run(ws.path, "ls-tree", "-r", "--name-only", snap.tree).splitlines()
        assert "*" in listed and ":(exclude)a.txt" in listed and "a.txt" in listed


# ---------------------------------------------------- attack 4: vouching for the own index


def _own(ws: Workspace) -> Path:
    assert ws.git_dir is not None
    return ws.git_dir / "index"


def _wait_past(second: int) -> None:
    while int(time.time()) <= second:
        time.sleep(0.005)


def _index_is_head(ws: Workspace) -> bool:
    return _run(ws.path, "write-tree").strip() == _run(ws.path, "rev-parse", "HEAD^{tree}").strip()


#: Set False by a control test: the hooks run, the vouch itself does not (what 2558621,
#: before c5c2325, did), to show that git sees the change then.
VOUCHING = [True]


@pytest.fixture
def hooked_vouch(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Callable[[], None]]]:
    """Hooks run just before ``own_index.vouch`` (after the first checkpoint's scan)."""
    hooks: list[Callable[[], None]] = []
    real = own_index.vouch
    VOUCHING[:] = [True]

    async def vouch(checkout: Checkout, head: str | None, scanned: str, *more: object) -> None:
        for hook in hooks:
            hook()
        if VOUCHING[0]:
            await real(checkout, head, scanned, *more)

    monkeypatch.setattr(snapshot.own_index, "vouch", vouch)
    yield hooks


@pytest.mark.parametrize("vouching", [True, False], ids=["vouched", "control-no-vouch"])
async def test_a_lower_edit_between_the_scan_and_the_vouch_without_trustctime(
    tmp_path: Path, hooked_vouch: list[Callable[[], None]], vouching: bool
) -> None:
    """core.trustctime=false (a documented git setting): git's stat check is mtime, size,
    inode. A same-size edit to the layer under the overlay after the scan read the file,
    mtime put back: before the vouch the entry is racy (git re-hashes it, finds it); the
    vouch must not make ``git status`` trust it."""
    repo = tmp_path / "proj"
    make_repo(repo, {f"f{i}.txt": b"file %d\n" % i for i in range(20)})
    git(repo, "config", "core.trustctime", "false")
    ws = await _worktree(tmp_path, repo)
    target = ws.path / "f7.txt"
    recorded = int(_own(ws).stat().st_mtime)
    assert int(target.stat().st_mtime) >= recorded, "the fresh checkout left f7.txt not racy"
    _wait_past(recorded)

    def edit() -> None:
        old = target.stat()
        with target.open("r+b") as f:
            f.write(b"FILE 7\n")
        os.utime(target, ns=(old.st_atime_ns, old.st_mtime_ns))

    hooked_vouch.append(edit)
    VOUCHING[0] = vouching
    await _first_scan(ws, tmp_path)
    assert _run(ws.path, "status", "--porcelain").split() == ["M", "f7.txt"]


@pytest.mark.parametrize("vouching", [True, False], ids=["vouched", "control-no-vouch"])
async def test_a_lower_edit_between_the_scan_and_the_vouch_in_the_same_second(
    tmp_path: Path, hooked_vouch: list[Callable[[], None]], vouching: bool
) -> None:
    """Default config. The own index is written in second T with f7.txt's stat of second T
    (racy), the scan reads it in T, a same-size in-place edit lands in T too (mtime and
    ctime still T, same inode), and the vouch runs in T+1: git must still see the edit."""
    for attempt in range(6):
        case = tmp_path / f"try{attempt}"
        case.mkdir()
        repo = case / "proj"
        make_repo(repo, {f"f{i}.txt": b"file %d\n" % i for i in range(20)})
        ws = await _worktree(case, repo, f"conv-sec{attempt}")
        target = ws.path / "f7.txt"
        _wait_past(int(time.time()))  # at the start of a second T
        target.write_bytes(b"file 7\n")  # same content: its stat now of second T
        _run(ws.path, "update-index", "--refresh")  # the own index written in T: racy
        start = int(time.time())
        fits: list[bool] = []

        def edit(target: Path = target, start: int = start, fits: list[bool] = fits) -> None:
            with target.open("r+b") as f:
                f.write(b"FILE 7\n")
            st = target.stat()
            fits.append(int(st.st_mtime) == int(st.st_ctime) == start)
            _wait_past(start)  # the vouch in a later second

        hooked_vouch[:] = [edit]
        VOUCHING[0] = vouching
        await _first_scan(ws, case, f"token-sec{attempt}")
        if fits and fits[0]:
            assert _run(ws.path, "status", "--porcelain").split() == ["M", "f7.txt"]
            return
    pytest.skip("could not fit the scan and the edit in one second")


async def test_holds_never_remembers_an_index_another_git_wrote_after_its_write_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``holds`` runs ``git write-tree``, then reads the index's stamp to remember it holds
    HEAD. A user's ``git add`` landing in between must not be remembered as holding HEAD:
    the gate would then bring only the run's paths up and leave the staged change."""
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n", "u.txt": b"u\n"})
    ws = await _worktree(tmp_path, repo)
    _wait_past(int(_own(ws).stat().st_mtime))
    real_run = Checkout.run
    fired: list[bool] = []

    async def run(self: Checkout, args: list[str], *rest: object, **kw: object):  # type: ignore[no-untyped-def]
        out = await real_run(self, args, *rest, **kw)  # type: ignore[arg-type]
        if list(args) == ["write-tree"] and not kw.get("env") and not fired:
            fired.append(True)
            # another git, just after write-tree exited: the user stages u.txt's removal
            _run(ws.path, "rm", "-q", "--cached", "u.txt")
        return out

    monkeypatch.setattr(Checkout, "run", run)
    await _first_scan(ws, tmp_path)  # its vouch asks holds(HEAD)
    monkeypatch.setattr(Checkout, "run", real_run)
    assert fired
    (ws.path / "a.txt").write_text("run\n")
    snap = await _landing(ws, {"a.txt"})
    result = await CommitGate("Gate Bot", "gate@example.test").land(ws, SUMMARY, scanned=snap)
    assert result.committed
    assert _index_is_head(ws), _run(ws.path, "diff", "--cached", "--stat")


async def test_a_user_add_after_the_vouch_makes_the_gate_reset_all(tmp_path: Path) -> None:
    """The own index, vouched for, then staged into by the user before the landing: holds
    must see it (its stamp changed) and the gate reset --mixed; status tells the truth."""
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n", "u.txt": b"u\n"})
    ws = await _worktree(tmp_path, repo)
    _wait_past(int(_own(ws).stat().st_mtime))
    await _first_scan(ws, tmp_path)
    # During the run the user edits u.txt through the worktree's path (it lands in the
    # overlay's upper, so the record names it) and stages it.
    (ws.path / "u.txt").write_text("user's edit\n")
    _run(ws.path, "add", "u.txt")
    (ws.path / "a.txt").write_text("run\n")
    snap = await _landing(ws, {"a.txt", "u.txt"})
    result = await CommitGate("Gate Bot", "gate@example.test").land(ws, SUMMARY, scanned=snap)
    assert result.committed and result.files == ["a.txt", "u.txt"]
    assert _index_is_head(ws)
    assert _run(ws.path, "status", "--porcelain") == ""


@pytest.mark.parametrize("how", ["index version 4", "split index", "index version 2"])
async def test_the_own_index_rewritten_by_another_git_before_the_gate(
    tmp_path: Path, how: str
) -> None:
    """Between the vouch and the gate, another git rewrites the own index with the same
    entries in another layout: holds learns it anew; status stays truthful; a same-size
    edit made before the rewrite is found."""
    repo = tmp_path / "proj"
    make_repo(repo, {f"f{i}.txt": b"file %d\n" % i for i in range(20)})
    ws = await _worktree(tmp_path, repo)
    _wait_past(int(_own(ws).stat().st_mtime))
    await _first_scan(ws, tmp_path)
    if how == "index version 4":
        _run(ws.path, "update-index", "--index-version", "4")
    elif how == "split index":
        _run(ws.path, "update-index", "--split-index")
    else:
        _run(ws.path, "update-index", "--index-version", "2", "--no-split-index")
    (ws.path / "f3.txt").write_text("run 3!\n")
    snap = await _landing(ws, {"f3.txt"})
    result = await CommitGate("Gate Bot", "gate@example.test").land(ws, SUMMARY, scanned=snap)
    assert result.committed and result.files == ["f3.txt"]
    assert _index_is_head(ws)
    assert _run(ws.path, "status", "--porcelain") == ""
    target = ws.path / "f5.txt"
    old = target.stat()
    target.write_bytes(b"FILE 5\n")
    os.utime(target, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert _run(ws.path, "status", "--porcelain").split() == ["M", "f5.txt"]


async def test_vouch_leaves_an_index_it_did_not_see_hold_head(
    tmp_path: Path, hooked_vouch: list[Callable[[], None]]
) -> None:
    """The own index changed by another git between the scan and the vouch (an entry
    staged): vouch must not touch it, and its racy entries stay racy."""
    repo = tmp_path / "proj"
    make_repo(repo, {f"f{i}.txt": b"file %d\n" % i for i in range(20)})
    ws = await _worktree(tmp_path, repo)
    before = _own(ws).stat().st_mtime_ns
    _wait_past(int(before / 1e9))

    def stage() -> None:
        (ws.path / "f1.txt").write_text("staged\n")
        _run(ws.path, "add", "f1.txt")
        (ws.path / "f1.txt").write_text("file 1\n")

    hooked_vouch.append(stage)
    await _first_scan(ws, tmp_path)
    assert _run(ws.path, "diff", "--cached", "--name-only").split() == ["f1.txt"]
    assert _run(ws.path, "status", "--porcelain").split() == ["MM", "f1.txt"]


# ------------------------------------------------------ more of what git add -A decides


@pytest.mark.parametrize("how", ["edited in place", "directory replaced", "tracked one gone"])
async def test_an_ignored_directory_holding_tracked_files(tmp_path: Path, how: str) -> None:
    """``build/`` is ignored but ``build/keep.o`` is tracked: git add of a path in it (or of
    the directory) updates what is tracked, adds nothing new, and says 'ignored' (exit 1)."""
    repo = tmp_path / "proj"
    make_repo(repo, {".gitignore": b"build/\n", "a.txt": b"a\n"})
    _commit_ignored(repo, ("build/keep.o", "build/sub/deep.o"), "tracked\n")
    ws = await _worktree(tmp_path, repo)
    await _first_scan(ws, tmp_path)
    b = ws.path / "build"
    if how == "edited in place":
        (b / "keep.o").write_text("edited\n")
        (b / "new.o").write_text("new, ignored\n")
        changed = {"build/keep.o", "build/new.o"}
    elif how == "directory replaced":
        shutil.rmtree(b)
        (b / "sub").mkdir(parents=True)
        (b / "keep.o").write_text("edited\n")
        (b / "new.o").write_text("new, ignored\n")
        changed = {"build", "build/sub", "build/keep.o", "build/new.o"}
    else:
        (b / "keep.o").unlink()
        (b / "sub/deep.o").write_text("edited\n")
        changed = {"build/keep.o", "build/sub/deep.o"}
    snap = await _landing(ws, changed)
    assert snap.from_overlay
    _assert_full_scan(ws, tmp_path, snap)


async def test_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    """libgit2's tree builder takes str names: a changed path that is not UTF-8 (or one
    beside it in the tree) must still land as git writes it."""
    repo = tmp_path / "proj"
    make_repo(repo, {"a.txt": b"a\n", "d/x.txt": b"x\n"})
    raw_name = os.fsdecode(b"d/caf\xe9.txt")
    (repo / raw_name).write_text("latin-1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a latin-1 name")
    ws = await _worktree(tmp_path, repo)
    await _first_scan(ws, tmp_path)
    (ws.path / "d/x.txt").write_text("edited beside it\n")
    (ws.path / os.fsdecode(b"n\xff.txt")).write_text("new, not utf-8\n")
    snap = await _landing(ws, {"d/x.txt", os.fsdecode(b"n\xff.txt")})
    _assert_full_scan(ws, tmp_path, snap)


async def test_a_submodules_empty_directory_deleted(tmp_path: Path) -> None:
    """The agent removes the uninitialised submodule's empty directory (a whiteout names
    ``sub``): a full scan drops the gitlink, and so must the landing."""
    repo = _repo_with_submodule(tmp_path)
    ws = await _worktree(tmp_path, repo)
    await _first_scan(ws, tmp_path)
    (ws.path / "sub").rmdir()
    snap = await _landing(ws, {"sub"})
    assert snap.from_overlay
    _assert_full_scan(ws, tmp_path, snap)
