"""Snapshotting a worktree into a git tree through a private, persistent index file.

The index lives in the checkout's own git dir and is kept between snapshots, so ``git add -A``
re-hashes only files whose stat data changed: that is what keeps checkpoints cheap on big
trees. The user's index, HEAD and branch are never written here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from synthorg import overlaylog
from synthorg.errors import ConflictError
from synthorg.logging import get_logger
from synthorg.workspace import index_file, own_index
from synthorg.workspace.checkout import Checkout, open_checkout
from synthorg.workspace.errors import NotAGitWorkspaceError
from synthorg.workspace.git import GitError, is_object_id
from synthorg.workspace.hostlimits import HostLimits, oversize, pending, without
from synthorg.workspace.index_file import (
    BIG_TREE_ENTRIES,
    REOWN_CHILD,
    libgit2_readable,
    reown_file,
)
from synthorg.workspace.index_file import stamp as index_stamp
from synthorg.workspace.journal import JOURNALS, Journal
from synthorg.workspace.locks import exclusive
from synthorg.workspace.models import Workspace
from synthorg.workspace.objects import (
    InProcessUnavailable,
    edit_tree,
    entries_under,
    write_index_tree,
)
from synthorg.workspace.spawn import run_collect

_log = get_logger("synthorg.workspace")

# Settings that make our index cheap on big trees and independent of the user's config:
# preloading lstat()s in threads; no fsmonitor hook may run (slow, or absent here). A big
# tree's index is also split (``_split_config``).
FAST_CONFIG = (
    "-c",
    "core.untrackedCache=true",
    "-c",
    "core.preloadIndex=true",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "advice.addEmbeddedRepo=false",
    "-c",
    "core.safecrlf=false",
)


def _split_config(split: bool) -> tuple[str, ...]:
    """A big tree's index is split, so each write stores only the entries that changed
    instead of rewriting (and re-hashing) all of them (measured: ~30% less CPU per checkpoint
    at 20,000 files). A small tree's is not: libgit2 then reads it and writes its tree
    in-process (~0.1 ms), where a ``git write-tree`` costs ~2 ms of CPU."""
    return (*FAST_CONFIG, "-c", f"core.splitIndex={'true' if split else 'false'}")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The worktree's content as a tree, and the commit HEAD pointed at when it was taken."""

    tree: str
    head: str | None
    unhashed: tuple[tuple[str, int], ...] = ()
    """Files left out of the tree, never hashed: (path, apparent size) over the size limit
    (hostlimits). The tree holds their last hashed content, or none; the gate refuses them."""
    from_overlay: bool = False
    """Taken from the run's last scan under its overlay plus the paths the overlay changed
    (``SnapshotIndex._from_overlay``), not from a scan of every file: the checkout's index
    then needs only those paths brought up to date."""


def require_git(ws: Workspace) -> tuple[Path, Path]:
    """The (git_dir, common_dir) of ``ws``, or a clear error when it is not git."""
    if ws.git_dir is None or ws.common_dir is None:
        raise NotAGitWorkspaceError(
            f"workspace {ws.path} is not a git checkout ({ws.note or 'no repository'}); "
            "git views, checkpoints and the commit gate need one"
        )
    return ws.git_dir, ws.common_dir


def state_dir(git_dir: Path) -> Path:
    """Where SynthOrg keeps per-checkout state (inside the checkout's private git dir)."""
    return git_dir / "synthorg"


def read_head(git_dir: Path, common_dir: Path) -> str | None:
    """HEAD's commit sha read straight from the ref files (no subprocess), None if unborn.

    Raises ``LookupError`` when the layout is one we do not parse (the caller asks git).
    """
    head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
    if is_object_id(head):
        return head
    if not head.startswith("ref: "):
        raise LookupError(head)
    ref = head.removeprefix("ref: ")
    per_worktree = ref.startswith(("refs/worktree/", "refs/bisect/", "refs/rewritten/"))
    for base in (git_dir,) if per_worktree else (common_dir,):
        loose = base / ref
        if loose.is_file():
            value = loose.read_text(encoding="utf-8").strip()
            if is_object_id(value):
                return value
            raise LookupError(value)
    packed = common_dir / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8").splitlines():
            parts = line.split(" ", 1)
            if len(parts) == 2 and parts[1] == ref and is_object_id(parts[0]):
                return parts[0]
    return None


async def head_sha(checkout: Checkout) -> str | None:
    """HEAD's commit sha, None when the branch has no commit yet."""
    try:
        return read_head(checkout.dirs.git_dir, checkout.dirs.common_dir)
    except (LookupError, OSError):
        out = await checkout.run(["rev-parse", "-q", "--verify", "HEAD^{commit}"], check=False)
        return out.text.strip() or None


class SnapshotIndex:
    """The private index of one checkout and the lock that serialises its users."""

    def __init__(self, checkout: Checkout, limits: HostLimits | None = None) -> None:
        self.co = checkout
        self.limits = limits or HostLimits()
        self.unhashed: list[tuple[str, int]] = []  # of the last add_all
        self.ws = checkout.ws
        self.dir = state_dir(checkout.dirs.git_dir)
        self.view = _view_owner(self.ws.path)
        name = "snapshot" if self.view is None else f"snapshot-{self.view[0]}"
        self.path = self.dir / f"{name}.index"
        self._head_marker = self.dir / f"{name}.head"
        self.env = {"GIT_INDEX_FILE": str(self.path)}
        self._journal_key = journal_key(self.ws)
        split = _SPLIT.get(self._journal_key)
        if split is None:  # decided once per checkout and process: a walk of <= 2,000 entries
            split = not _small_tree(self.ws.path)
            if len(_SPLIT) >= _MAX_TREES:
                _SPLIT.clear()
            _SPLIT[self._journal_key] = split
        self.split = split
        """Whether the index is kept split (big trees); else libgit2 writes its trees."""
        self.config = _split_config(split)

    @asynccontextmanager
    async def locked(self) -> AsyncIterator[SnapshotIndex]:
        """Hold the index against other tasks and processes working on the same checkout."""
        async with exclusive(self.dir / "snapshot.lock"):
            # Under this lock no other git can be writing the private index: a lock file left
            # by a git killed mid-write (a cancelled run) is stale; remove it, or every later
            # snapshot of this checkout fails.
            for stale in (self.path.with_name(self.path.name + ".lock"),):
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()
            yield self

    async def _seed(self, head: str | None) -> None:
        """(Re)start the private index from the user's index, which carries fresh stat data.

        Copying it (read-only for the user) means even the first snapshot need not re-hash
        every file, and files tracked despite .gitignore stay tracked.
        """
        real = self.co.dirs.git_dir / "index"
        tmp = self.path.with_suffix(".seed")
        if real.is_file():
            # copy2 keeps the index's mtime: git's racy-clean check compares entry mtimes
            # against it, and a fresh mtime would hide same-second, same-size edits.
            shutil.copy2(real, tmp)
            reowned = tmp.with_suffix(".own")
            if self.view is not None and await self._translated(tmp, reowned):
                copied = tmp.stat()
                os.utime(reowned, ns=(copied.st_atime_ns, copied.st_mtime_ns))
                os.replace(reowned, tmp)  # its mtime is the seed's: racy-clean
            os.replace(tmp, self.path)
        elif head is not None:
            await self.co.run(["read-tree", head], env=self.env)
        else:
            await self.co.run(["read-tree", "--empty"], env=self.env)
        self._head_marker.write_text(head or "", encoding="utf-8")

    async def _translated(self, seed: Path, out: Path) -> bool:
        """The user's index records the host's view (its files owned by the host): for the
        idmapped view the same entries are recorded as owned by the ids shown there, so the
        first scan re-hashes only what changed (else every file: 1.6 s for 38,491 files).
        Written to ``out``; False (the seed left as copied, git then re-hashes) when the
        index is not one ``reowned`` rewrites or the child failed.

        A big tree's in a child interpreter, not a thread: ~150 ms of Python at 100,000
        entries, which in a thread holds the interpreter while the event loop serves the
        run's first model call (the loop then gets it back every 5 ms switch: that call
        came 270 ms later at 100,000 files, 312 vs 623 ms in one run). The child is host
        work of the run (``spawn.run_collect``). A small tree's (not split: under
        ``BIG_TREE_ENTRIES``) takes less than starting a child, so a thread does it."""
        assert self.view is not None
        host = (os.geteuid(), os.getegid())
        git_dir = self.co.dirs.git_dir
        if not self.split:
            return await asyncio.to_thread(reown_file, seed, out, git_dir, host, self.view)
        ids = [str(i) for i in (*host, *self.view)]
        argv = [sys.executable, "-I", "-S", "-c", REOWN_CHILD, index_file.__file__,
                str(seed), str(out), str(git_dir), *ids]  # fmt: skip
        with contextlib.suppress(FileNotFoundError):
            os.unlink(out)
        try:
            code, _, err = await run_collect(argv, cwd=self.dir, env={}, stdin=None)
        except OSError as exc:
            code, err = -1, str(exc).encode()
        if code not in (0, 3):
            _log.info("workspace.seed_not_translated", worktree=str(self.ws.path),
                      error=err.decode(errors="replace")[-500:])  # fmt: skip
        return code == 0  # the child exits 0 only once it has written out

    async def add_all(self, *, full: bool = False, lower_only: bool = False) -> str | None:
        """Bring the private index in line with the worktree; returns HEAD's sha.

        ``full`` scans every file whatever the journal says (the gate decides landing by
        content, never by a cache). ``lower_only`` (a run's early scan): under a live
        overlay whose layer below can be read, that layer is scanned whatever the run
        writes meanwhile, and not read again through the overlay: the index then holds
        that layer, the tree before any write of the run, and the journal names to the next
        ``add_all`` every path where the overlay differs from it (the upper's entries when
        it began to watch, ``_upper_paths``, and every event since).
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        self.unhashed = []
        try:
            return await self._add_all(full, lower_only)
        except BaseException:
            # Failed or cancelled part way (a host limit, a git error, a run stopped during
            # its early scan): the journal may already watch, its drained changes unadded,
            # and the index be seeded but not scanned. Forgetting both makes the next
            # snapshot seed and scan everything rather than trust either (red team:
            # tests/workspace/test_redteam_pending.py).
            JOURNALS.discard(self._journal_key)
            with contextlib.suppress(FileNotFoundError):
                self._head_marker.unlink()
            raise

    async def _add_all(self, full: bool, lower_only: bool = False) -> str | None:
        scan_asked = full
        head = await head_sha(self.co)
        try:
            seeded_for = self._head_marker.read_text(encoding="utf-8")
        except FileNotFoundError:
            seeded_for = None
        # HEAD moved (someone committed): files it now tracks may be ignored ones.
        reseed = seeded_for is None or not self.path.is_file() or seeded_for != (head or "")
        own = self.co.dirs.git_dir / "index"
        if reseed and not own.is_file():
            await self._seed(head)  # from HEAD: the journal's listing needs this index
            reseed = False
            full = True
        elif reseed:
            full = True
        journal = JOURNALS.get(self._journal_key)
        restart = journal is None
        if journal is not None:
            changes = journal.drain()
            # Unsure (overflow, a moved directory) or a changed .gitignore, which can
            # un-ignore directories that are not watched: watch afresh and scan everything.
            restart = changes.everything or any(_is_ignore_file(p) for p in changes.paths)
            if not (full or restart):
                # A file of several names: a write through one is reported under that name
                # only (inotify watches directories), so its others may have changed too.
                # Under the overlay every name of such a file made in the run is in the
                # upper (a lower one's copy-up parts it from its other names), and a write
                # through one in an unwatched (ignored) dir is reported by none: the upper
                # is asked, even when the journal names nothing.
                layer = overlaylog.live(self.ws.path)
                aliased = (
                    await asyncio.to_thread(_upper_has_links, layer[2])
                    if layer is not None
                    else _has_other_names(self.ws.path, changes.paths)
                )
                if aliased:
                    full = True
                elif changes.paths:
                    full = not await self._add_paths(changes.paths)
        if restart and scan_asked:
            # A one-shot full scan (NO_OP check, gate, views) needs no journal, and one started
            # now is usually voided before it helps (the next run's quota image is mounted
            # over the worktree): the next checkpoint starts it, scanning everything then.
            JOURNALS.discard(self._journal_key)
        watched: list[tuple[str, Path] | None] = [None]

        async def watch() -> None:
            # Before the scan, so nothing falls in between; listing the ignored dirs by the
            # index the seed is copied from while that seed is made.
            await self._start_journal({} if reseed else self.env)
            journal = JOURNALS.get(self._journal_key)
            layer = overlaylog.live(self.ws.path) if lower_only else None
            if journal is not None and layer is not None and (full or restart):
                # After the watches: what was written before them is in the upper now.
                token, lower, upper = layer
                paths, dirs = await asyncio.to_thread(_upper_paths, upper)
                journal.note(paths, dirs)
                watched[0] = (token, lower)

        try:
            async with asyncio.TaskGroup() as group:
                if restart and not scan_asked:
                    group.create_task(watch())
                if reseed:
                    group.create_task(self._seed(head))
        except ExceptionGroup as failed:  # the first failure, as one step would raise it
            raise failed.exceptions[0] from None
        if full or restart:
            await self._add_everything(head, watched[0])
        return head

    async def _add_everything(
        self,
        head: str | None,
        watched_below: tuple[str, Path] | None = None,
    ) -> None:
        """``git add -A`` of the whole tree, but for what the host limits leave out.

        Under a run's overlay that has changed nothing yet (its first checkpoint, before any
        action), the tree is read below the overlay, where it is the same (``overlaylog.
        unchanged_lower``): no overlay inode per file. Checked again after: a write during
        the scan means it is read again through the overlay. ``watched_below``: the layer
        of the live overlay whose upper the journal has taken in (``add_all``'s
        ``lower_only``): read there, whatever was written since."""
        below = watched_below or overlaylog.unchanged_lower(self.ws.path)
        if below is not None:
            token, lower = below
            started = self._file_clock()  # what the scan can vouch for was written before
            said = await self._add_everything_in(lower, {**self.env, "GIT_WORK_TREE": str(lower)})
            # git skips what it cannot read there and only warns (a host file of an owner the
            # idmap does not map, in a dir closed to others): such a scan is not the whole
            # layer, and the landing must not take it for one (the full scan reads as root).
            if not said.strip():
                self._keep_lower_scan(token, head, started)
            if watched_below is not None or overlaylog.unchanged_lower(self.ws.path) == below:
                return  # (watched: the journal names every path where the overlay differs)
        await self._add_everything_in(self.ws.path, self.env)

    def _file_clock(self) -> int:
        """Now, as a file written now records it (the kernel's coarse clock, which lags the
        precise one by up to a tick): the mtime of a marker file touched for it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        marker = self.dir / "clock"
        marker.touch()
        return marker.stat().st_mtime_ns

    def _keep_lower_scan(self, token: str, head: str | None, started_ns: int) -> None:
        """Keep this scan of the tree under an overlay for the landing (``_from_overlay``):
        a copy of the index as it now is, the layer's content exactly. Not when a file was
        too big to hash (its entry is older: only a scan by the gate's rules may judge it).
        A split index's copy names the same shared index, which git keeps (weeks)."""
        _LOWER_SCANS.pop(self._journal_key, None)
        if self.unhashed:
            return
        kept = self.path.with_name(self.path.name.removesuffix(".index") + "-lower.index")
        shutil.copy2(self.path, kept)  # its mtime too: git's racy-clean check reads it
        stamp = index_stamp(kept)
        if stamp is not None:
            _LOWER_SCANS[self._journal_key] = _LowerScan(token, kept, stamp, head, started_ns)

    async def _add_everything_in(self, root: Path, env: dict[str, str]) -> str:
        """``git add -A`` of the tree at ``root``; what git said on stderr (its warnings)."""
        big = oversize(root, await pending(self.co, env), self.limits)
        self.unhashed = big
        if not big:
            out = await self.co.run_retrying([*self.config, "add", "-A"], env=env)
            return out.stderr
        out = await self.co.run_retrying(
            [*self.config, "add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"],
            env=env,
            stdin=_nul(without(["."], big)),
        )
        return out.stderr

    async def _add_paths(
        self,
        paths: set[str],
        env: dict[str, str] | None = None,
        config: tuple[str, ...] | None = None,
    ) -> bool:
        """``git add -A`` limited to ``paths`` (in the index ``env`` names, else this one,
        with ``config``, else this index's); False when only a full scan will do."""
        env = env or self.env
        config = config or self.config
        specs = _pathspecs(self.ws.path, paths)
        if specs is None:
            return False
        root = self.ws.path
        dirs = [s for s in specs if not (root / s).is_symlink() and (root / s).is_dir()]
        listed = [s for s in specs if s not in dirs]
        if dirs:  # what add would hash inside them, by git's ignore rules
            listed += await pending(self.co, env, dirs)
        big = oversize(root, listed, self.limits)
        self.unhashed = big
        literal = () if big else ("--literal-pathspecs",)  # exclusions need pathspec magic
        out = await self.co.run(
            [
                *config,
                "-c",
                "advice.addIgnoredFile=false",
                *literal,
                "add",
                "-A",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
            ],
            env=env,
            stdin=_nul(without(specs, big) if big else specs),
            check=False,
        )
        # Exit 1 listing ignored paths still adds the rest: that is the outcome we want.
        return out.returncode == 0 or (
            out.returncode == 1 and "The following paths are ignored" in out.stderr
        )

    async def _start_journal(self, env: dict[str, str] | None = None) -> None:
        """(Re)start watching the worktree; in a large tree wholly ignored directories are
        not watched (a small one is watched whole: listing them costs a git process, and
        the few events from ignored paths only name paths ``git add`` then ignores). ``env``:
        the index that lists them (default: this one; ``{}``: the checkout's own)."""
        key = self._journal_key
        JOURNALS.discard(key)
        skip: set[str] = set()
        layer = overlaylog.live(self.ws.path)
        dirs: list[str] | None = None
        if not _small_tree(self.ws.path):
            ignored = ["ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                       "--directory"]  # fmt: skip
            try:
                async with asyncio.TaskGroup() as group:  # both on the other core
                    listed = group.create_task(
                        self.co.run(ignored, env=self.env if env is None else env)
                    )
                    found = group.create_task(_directories(layer[1])) if layer else None
            except ExceptionGroup as failed:  # the first failure, as one git would raise it
                raise failed.exceptions[0] from None
            skip = {p.rstrip("/") for p in listed.result().text.split("\0") if p.endswith("/")}
            dirs = found.result() if found is not None else None
        journal = Journal(self.ws.path, skip)
        if journal.start(dirs):
            JOURNALS.add(key, journal)

    async def write_tree(self) -> str:
        """The tree of the private index (remembered while the index content is unchanged)."""
        key = self._journal_key
        cached = _TREES.get(key)
        before = index_stamp(self.path)
        if cached is not None and cached[0] == before:
            _note_lower_tree(key, before, cached[1])
            return cached[1]  # the same entries give the same tree: no git process
        tree = self._write_tree_in_process()
        if tree is None:
            out = await self.co.run_retrying([*self.config, "write-tree"], env=self.env)
            tree = out.text.strip()
        _note_lower_tree(key, before, tree)
        # Read after write-tree, which may rewrite the index (cache-tree) with the same
        # entries; the caller holds the index lock, so no other writer came in between.
        stamp = index_stamp(self.path)
        if stamp is not None:
            if len(_TREES) >= _MAX_TREES:
                _TREES.clear()
            _TREES[key] = (stamp, tree)
        return tree

    def _write_tree_in_process(self) -> str | None:
        """The index's tree by libgit2 when the index is one it reads; None: ask git."""
        if self.split or not libgit2_readable(self.path):
            return None
        try:
            return write_index_tree(self.co.dirs.common_dir, self.path)
        except InProcessUnavailable:
            return None

    def adopt_as_index(self, tree: str) -> bool:
        """Make this private index the checkout's own when it holds exactly ``tree``, as
        ``git reset --mixed`` to a commit of ``tree`` would (its stat data is fresh). False,
        touching nothing, when that is not known (split, changed since, or git is writing the
        checkout's index): then ask git. Hold ``locked()``.

        Written as git writes an index: into ``index.lock``, renamed over ``index``. The copy
        keeps the private index's mtime: git's racy-clean check compares entries against it.
        """
        stamp = index_stamp(self.path)
        if self.split or stamp is None or _TREES.get(self._journal_key) != (stamp, tree):
            return False
        if not libgit2_readable(self.path):  # still split from an earlier write, or unusual
            return False
        own = self.co.dirs.git_dir / "index"
        lock = own.with_name("index.lock")
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return False  # another git holds it
        try:
            with os.fdopen(fd, "wb") as out, self.path.open("rb") as source:
                shutil.copyfileobj(source, out)
                written = os.fstat(source.fileno())
            if index_stamp(lock) != stamp:
                raise OSError("the private index changed while it was copied")
            os.utime(lock, ns=(written.st_atime_ns, written.st_mtime_ns))
            os.replace(lock, own)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
            raise
        return True

    async def snapshot(
        self,
        *,
        full: bool = False,
        overlay: bool = False,
        lower_only: bool = False,
    ) -> Snapshot:
        """Capture the worktree (tracked and untracked, not ignored) as a tree.

        ``overlay``: when the worktree's last overlay was just released (its run ended) and
        this checkout's index scanned the tree whole under that overlay, that scan plus what
        the overlay changed is the tree (``_from_overlay``); else, or when unsure, the
        scan ``full`` asks for. ``lower_only``: see ``add_all``."""
        if overlay:
            landed = await self._from_overlay()
            if landed is not None:
                return landed
        elif full:
            overlaylog.forget(self.ws.path)  # a scan of everything: the record is not needed
        head = await self.add_all(full=full, lower_only=lower_only)
        tree = await self.write_tree()
        scan = _LOWER_SCANS.get(self._journal_key)
        if scan is not None and scan.tree == tree and not scan.vouched:
            # This scan read every file the checkout's own index describes, unchanged under
            # the overlay: it can vouch for that index's racily clean entries (own_index).
            _LOWER_SCANS[self._journal_key] = replace(scan, vouched=True)
            await own_index.vouch(self.co, head, tree, scan.started_ns)
        return Snapshot(tree=tree, head=head, unhashed=tuple(self.unhashed))

    async def _from_overlay(self) -> Snapshot | None:
        """The tree as a scan of the layer under the run's overlay saw it (the run's first
        checkpoint, ``_keep_lower_scan``), with the paths the overlay changed (sandbox/
        upper.py names them as it applies them) scanned again; None when either record is
        missing, from another overlay, or the kept index, HEAD or a rule file (.gitignore,
        .gitattributes, anything in .git) changed since.

        Why it is the whole tree: while the overlay covered the worktree every write to it
        went into the overlay's upper layer, and the layer under it did not change (a write
        reaching the real directory by another path, such as a second bind mount or a hard
        link from outside, is one overlayfs itself leaves undefined). At release the upper
        names every path where the tree now differs from that layer: what it holds, and a
        whiteout for each of the layer's entries deleted. So a path it does not name holds
        what the scan saw. It must be a scan of that layer, not of the overlay: a file made
        in the upper, scanned, then deleted leaves no whiteout (nothing under it to hide),
        and a scan of the overlay would still hold it. Both records are taken once: the
        landing they serve is the next reader of the tree."""
        released = overlaylog.take_released(self.ws.path)
        scan = _LOWER_SCANS.pop(self._journal_key, None)
        why = _not_from_overlay(released, scan)
        head = await head_sha(self.co)
        if why is None and scan is not None and head != scan.head:
            why = "HEAD moved since the scan"
        if why is not None or released is None or scan is None:
            _log.info("workspace.landing_scans_all", worktree=str(self.ws.path), why=why)
            return None
        try:
            tree = await self._landing_tree(scan, released.changed)
        except GitError as exc:  # an odd path git refuses: the full scan decides
            _log.info("workspace.landing_scans_all", worktree=str(self.ws.path), why=str(exc))
            return None
        if tree is None:
            return None
        _log.info("workspace.landing_from_overlay", worktree=str(self.ws.path),
                  paths=len(released.changed))  # fmt: skip
        return Snapshot(tree=tree, head=head, unhashed=tuple(self.unhashed), from_overlay=True)

    async def _landing_tree(self, scan: _LowerScan, changed: frozenset[str]) -> str | None:
        """The tree of the ``scan`` with the ``changed`` paths scanned again (None when git
        would not add them one by one): its tree edited in-process where only the changed
        paths were read, by ``git add`` into an index of just those paths; else a copy of
        its whole index with them added (``_landing_index``)."""
        root = self.ws.path
        gone = {p for p in changed if not (root / p).exists(follow_symlinks=False)}
        present = changed.difference(gone)
        self.unhashed = []
        if scan.tree is None:
            return await self._landing_index(scan.index, gone, present)
        common = self.co.dirs.common_dir
        try:
            seed = entries_under(common, scan.tree, present)
            put = await self._added_alone(seed, present) if present else []
            if put is None:
                return None
            return edit_tree(common, scan.tree, changed, put)
        except InProcessUnavailable:
            self.unhashed = []
            return await self._landing_index(scan.index, gone, present)

    async def _added_alone(
        self, seed: list[tuple[int, str, str]], present: frozenset[str]
    ) -> list[tuple[int, str, str]] | None:
        """(mode, sha, path) of everything at or under ``present`` as ``git add -A`` of them
        records it, in an index of only those paths: ``seed``, the scan's entries there,
        first (so a file tracked despite .gitignore stays tracked, as in the whole index).
        Costs what the paths hold, not what the tree holds. None when git would not add
        them one by one."""
        alone = self.dir / "snapshot-landing.index"
        alone.unlink(missing_ok=True)
        env = {"GIT_INDEX_FILE": str(alone)}
        config = _split_config(False)  # a few entries: never split
        if seed:
            info = b"".join(
                f"{mode:o} {sha}\t".encode() + os.fsencode(path) + b"\0" for mode, sha, path in seed
            )
            await self.co.run([*config, "update-index", "-z", "--index-info"], env=env,
                              stdin=info)  # fmt: skip
        if not await self._add_paths(set(present), env, config):
            return None
        listed = await self.co.run([*config, "ls-files", "--stage", "-z"], env=env)
        put = []
        for record in listed.stdout.split(b"\0"):
            if not record:
                continue
            meta, _, path = record.partition(b"\t")
            mode, sha, _stage = meta.split(b" ")
            try:
                name = path.decode("utf-8")
            except UnicodeDecodeError as exc:  # libgit2's tree builder takes str names
                raise InProcessUnavailable(str(exc)) from exc
            put.append((int(mode, 8), sha.decode("ascii"), name))
        return put

    async def _landing_index(
        self, scanned: Path, gone: set[str], present: frozenset[str]
    ) -> str | None:
        """The tree of a copy of the ``scanned`` index with ``gone`` removed and ``present``
        added again: reads and writes the whole index (git's cost grows with the tree)."""
        landing = self.dir / "snapshot-landing.index"
        shutil.copy2(scanned, landing)  # its mtime too: git's racy-clean check reads it
        env = {"GIT_INDEX_FILE": str(landing)}
        if gone:
            await self.co.run_retrying(
                [
                    *self.config,
                    "--literal-pathspecs",
                    "rm",
                    "--cached",
                    "-r",
                    "-q",
                    "--ignore-unmatch",
                    "--pathspec-from-file=-",
                    "--pathspec-file-nul",
                ],
                env=env,
                stdin=_nul(sorted(gone)),
            )
        if present and not await self._add_paths(set(present), env):
            return None
        out = await self.co.run_retrying([*self.config, "write-tree"], env=env)
        return out.text.strip()

    async def lower_snapshot(self, token: str, lower: Path) -> Snapshot:
        """The tree of the layer under the live overlay ``token`` (mounted at ``lower``),
        whatever the run has written since: the whole scan kept of it (``_keep_lower_scan``),
        its tree written if it was not yet; else (no such scan: a file too big to hash, a
        warning from git, a failed early scan) that layer scanned now, into an index of its
        own (this one's entries may be the overlay's by now). The layer does not change while
        the overlay is mounted, so either is the tree as it was when the overlay was empty."""
        scan = _LOWER_SCANS.get(self._journal_key)
        if scan is not None and scan.token == token:
            if scan.tree is not None:
                return Snapshot(tree=scan.tree, head=scan.head)
            env = {"GIT_INDEX_FILE": str(scan.index)}
            out = await self.co.run_retrying([*self.config, "write-tree"], env=env)
            tree = out.text.strip()
            _note_lower_tree(self._journal_key, scan.stamp, tree)
            return Snapshot(tree=tree, head=scan.head)
        if not overlaylog.is_live(self.ws.path, token):
            raise ConflictError(f"the overlay {token} is gone: the layer under it is not there")
        head = await head_sha(self.co)
        alone = self.dir / "snapshot-below.index"
        if self.path.is_file():
            shutil.copy2(self.path, alone)  # a stat cache only: add -A makes it the layer's
        else:
            alone.unlink(missing_ok=True)
        env = {"GIT_INDEX_FILE": str(alone), "GIT_WORK_TREE": str(lower)}
        said = await self._add_everything_in(lower, env)
        if said.strip():
            _log.info("workspace.lower_scan_incomplete", worktree=str(self.ws.path),
                      git=said.strip()[:500])  # fmt: skip
        if not overlaylog.is_live(self.ws.path, token):  # unmounted during the scan
            raise ConflictError(f"the overlay {token} went during the scan of the layer under it")
        out = await self.co.run_retrying([*self.config, "write-tree"], env=env)
        return Snapshot(tree=out.text.strip(), head=head, unhashed=tuple(self.unhashed))

    async def restore(self, tree: str) -> None:
        """Make the worktree's non-ignored files exactly ``tree``'s; ignored files stay.

        The index first learns every current file (``add -A``), so ``read-tree --reset -u``
        deletes the ones ``tree`` lacks and writes the rest; ignored files are not in the
        index and are therefore left alone.
        """
        overlaylog.forget(self.ws.path)  # a host-side write no overlay recorded
        await self.add_all()
        await self.co.run_retrying([*self.config, "read-tree", "--reset", "-u", tree], env=self.env)


async def _directories(root: Path) -> list[str] | None:
    """Every directory under ``root`` (not .git's), relative: the layer under a run's
    overlay, which does not change, listed by ``find`` in a child (host work of the run)
    rather than walked in Python on the event loop (~55 ms at 100,000 files, while the
    loop serves the run's first model call). None when it cannot be listed (the journal
    then walks)."""
    argv = ["find", str(root), "-mindepth", "1", "-name", ".git", "-prune",
            "-o", "-type", "d", "-printf", "%P\\0"]  # fmt: skip
    try:
        code, out, _ = await run_collect(argv, cwd=root, env={"LC_ALL": "C"}, stdin=None)
    except OSError:
        return None
    if code != 0:
        return None
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def _upper_entries(upper: Path, *, top_git: bool) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """(worktree path, entry) of every entry of the overlay's ``upper``, following nothing;
    ``top_git``: the top-level .git and what it holds too. OSError when one cannot be read."""
    stack = [("", str(upper))]
    while stack:
        rel, at = stack.pop()
        with os.scandir(at) as listing:
            for entry in listing:
                if not (rel or top_git) and entry.name == ".git":
                    continue
                name = f"{rel}/{entry.name}" if rel else entry.name
                yield name, entry
                if entry.is_dir(follow_symlinks=False):
                    stack.append((name, entry.path))


def _upper_has_links(upper: Path) -> bool:
    """Whether the overlay's upper holds a regular file of several names (a hard link made
    in the run: overlayfs copies a linked lower file up, so both names are there; in .git
    too, whose events the journal drops), or cannot be read or is past _MAX_UPPER_PATHS
    (then: scan everything, to be sure)."""
    try:
        for seen, (_, entry) in enumerate(_upper_entries(upper, top_git=True), 1):
            if seen > _MAX_UPPER_PATHS:
                return True
            if entry.is_file(follow_symlinks=False) and (
                entry.stat(follow_symlinks=False).st_nlink > 1
            ):
                return True
    except OSError:
        return True
    return False


#: Past this many entries in the upper when the journal starts, the next checkpoint scans all.
_MAX_UPPER_PATHS = 20_000


def _upper_paths(upper: Path) -> tuple[set[str] | None, set[str]]:
    """Every entry of the overlay's ``upper`` as a worktree path (files, links, whiteouts,
    directories: a replaced one hides what was below it), and which are directories; None
    past _MAX_UPPER_PATHS or when it cannot be read (then the next checkpoint scans
    everything). Read while the overlay is live, after the journal's watches are placed:
    an entry made meanwhile is also reported by them."""
    paths: set[str] = set()
    dirs: set[str] = set()
    try:
        # Not the top-level .git: git metadata, as the journal's events of it.
        for name, entry in _upper_entries(upper, top_git=False):
            if entry.name == ".git":
                # A nested repository: named one by one, git would add its files as plain
                # ones; a whole scan refuses it, as the gate does.
                return None, set()
            paths.add(name)
            if len(paths) > _MAX_UPPER_PATHS:
                return None, set()
            if entry.is_dir(follow_symlinks=False):
                dirs.add(name)
    except OSError:
        return None, set()
    return paths, dirs


# Per private index: (its content stamp, the tree written from it). A checkpoint after a
# command that changed nothing then costs no git process at all.
_TREES: dict[str, tuple[tuple[int, bytes], str]] = {}
_MAX_TREES = 1024
# Per private index: whether it is kept split (its tree was big when first seen here).
_SPLIT: dict[str, bool] = {}


@dataclass(frozen=True, slots=True)
class _LowerScan:
    """A whole scan of the layer under one overlay: a copy of its index (``_keep_lower_scan``)."""

    token: str
    index: Path
    stamp: tuple[int, bytes]
    head: str | None
    started_ns: int
    """When the scan began, by the clock files' mtimes come from (``_file_clock``)."""
    tree: str | None = None
    """Its tree, once the checkpoint that took it has written it (``write_tree``)."""
    vouched: bool = False
    """Whether it was offered to ``own_index.vouch`` (once)."""


# Per checkout: its last scan of the layer under a live overlay, until a landing takes it.
_LOWER_SCANS: dict[str, _LowerScan] = {}


def _note_lower_tree(key: str, stamp: tuple[int, bytes] | None, tree: str) -> None:
    """Remember ``tree`` as the kept scan's when the index it was written from (of ``stamp``,
    read before the write: ``git write-tree`` may add its cache to the file) is that scan."""
    scan = _LOWER_SCANS.get(key)
    if scan is not None and scan.tree is None and stamp is not None and scan.stamp == stamp:
        _LOWER_SCANS[key] = replace(scan, tree=tree)


#: Past this many changed paths a full scan costs about as much as naming them.
_MAX_OVERLAY_PATHS = 20_000


def _view_owner(root: Path) -> tuple[int, int] | None:
    """None for the host's own view of the worktree, else the (uid, gid) its files show as: a run's
    overlay reads an idmapped lower layer (sandbox/idmap.py), where every file shows as the
    sandbox user's. Each view keeps its own index: git's stat cache compares owners, so one
    index shared by both re-hashed every file at each switch (a checkpoint in the run, then
    the landing: +1.9 s on 100,000 files). ``.git``'s owner tells them apart (the agent may
    replace it, but only as its own uid: at worst a stat cache is cold, never wrong, since
    no entry of one view's index matches a file of the other's)."""
    try:
        st = os.lstat(root / ".git")
    except OSError:
        return None
    return None if st.st_uid == os.geteuid() else (st.st_uid, st.st_gid)


#: A tree with fewer entries than this is watched whole: a few ignored directories cost a
#: few watches, where listing them costs a ``git ls-files`` process per journal start. (Its
#: indexes are not split either: one rule for a big tree.)
_JOURNAL_MIN_ENTRIES = BIG_TREE_ENTRIES


def _small_tree(root: Path) -> bool:
    """Whether the worktree has fewer than _JOURNAL_MIN_ENTRIES entries.

    Counts without following symlinks and stops at the bound, so a large tree costs no
    more than that many directory entries to find out.
    """
    left, stack = _JOURNAL_MIN_ENTRIES, [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as listing:
                for entry in listing:
                    left -= 1
                    if left <= 0:
                        return False
                    if entry.name != ".git" and entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            return False  # unreadable: let the journal decide, as before
    return True


def _has_other_names(root: Path, paths: set[str]) -> bool:
    """Whether any of ``paths`` is a regular file with more than one link (red team:
    tests/sandbox/test_redteam_deferred_checkpoint.py, a write through a hard link)."""
    for path in paths:
        try:
            st = os.lstat(root / path)
        except (OSError, ValueError):
            continue  # gone (or unnameable): git add decides
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            return True
    return False


def _nul(specs: list[str]) -> bytes:
    return b"".join(os.fsencode(s) + b"\0" for s in specs)


def journal_key(ws: Workspace) -> str:
    """The journal registry's key for ``ws``.

    A journal belongs to one work tree of one repository, never to a path alone: a repository
    re-created at the same path gets fresh admin dirs with the same names.
    """
    assert ws.git_dir is not None
    return f"{state_dir(ws.git_dir) / 'snapshot.index'}\0{ws.path}\0{ws.repo_identity}"


def _not_from_overlay(released: overlaylog.Released | None, scan: _LowerScan | None) -> str | None:
    """Why an overlay's record cannot stand in for a full scan; None when it can."""
    if released is None:
        return "no record of the overlay's changes"
    if scan is None or released.token != scan.token:
        return "no scan of the layer under that overlay"
    if len(released.changed) > _MAX_OVERLAY_PATHS:
        return f"more than {_MAX_OVERLAY_PATHS} changed paths"
    rules = sorted(filter(_is_rule_path, released.changed))
    if rules:
        return f"a rule file changed ({rules[0]})"
    if index_stamp(scan.index) != scan.stamp:
        return "the kept index changed since"
    return None


def _is_rule_path(path: str) -> bool:
    """A path whose change changes how other paths are read: ignore and attribute files
    (what is left out, how content is converted), and anything in or named ``.git``."""
    parts = path.split("/")
    return ".git" in parts or parts[-1] in (".gitignore", ".gitattributes")


def _is_ignore_file(path: str) -> bool:
    # A changed .gitignore can un-ignore directories the journal does not watch.
    return path == ".gitignore" or path.endswith("/.gitignore")


def _pathspecs(root: Path, paths: set[str]) -> list[str] | None:
    """Each changed path, or for a vanished one its nearest existing parent directory.

    None when that parent is the root itself (then only a full scan is as cheap).
    """
    specs: set[str] = set()
    for rel in paths:
        candidate = rel
        while candidate and not os.path.lexists(root / candidate):
            candidate = candidate.rpartition("/")[0]
        if not candidate:
            return None
        specs.add(candidate)
    return sorted(specs)


def forget(ws: Workspace) -> None:
    """Stop watching a checkout (its worktree is being removed)."""
    if ws.git_dir is not None:
        JOURNALS.discard(journal_key(ws))


async def snapshot_tree(
    checkout: Checkout, limits: HostLimits | None = None, *, overlay: bool = False
) -> Snapshot:
    """Snapshot a checkout under its lock, scanning every file (for one-shot callers: the
    changes and diff views, the NO_OP check; ``overlay``, the NO_OP check of a run that has
    just ended: its overlay's record of what it changed may stand in for the full scan).

    Never from the journal alone: a sandbox's disk quota mounts an image over the worktree,
    so a watch set before the mount sees none of the run's writes (a completed run was
    judged NO_OP with its work in the worktree). What decides an outcome reads the content.
    """
    async with SnapshotIndex(checkout, limits).locked() as index:
        return await index.snapshot(full=True, overlay=overlay)


async def open_git(ws: Workspace) -> Checkout:
    """``ws`` verified for host git (``require_git`` first, for its clearer message)."""
    require_git(ws)
    return await open_checkout(ws)
