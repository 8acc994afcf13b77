"""The checkout's own index (the one ``git status`` reads): whether it holds a commit's tree
with nothing staged, and telling git that its racily clean entries are clean once a whole
scan has read every file.

Racily clean entries: git compares an entry's mtime with its index file's, in whole seconds
here (Debian's git is built without nanosecond timestamps). A file written in the second its
index was written may have changed after git looked at it, so git re-hashes every such entry
whenever it writes that index, until one write happens in a later second. A worktree's
checkout writes its files and then its index in the same second for the last second's worth
of files: on a 100,000-file tree tens of thousands of entries, ~70 ms of hashing, which the
first landing paid (``git reset`` of the changed paths) although the run's first checkpoint
had just hashed the same files under the overlay. (Red team round 3 of this module:
tests/workspace/test_redteam_landing_edit.py.)
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from synthorg.workspace.checkout import Checkout
from synthorg.workspace.index_file import stamp
from synthorg.workspace.objects import InProcessUnavailable, tree_of

# Per checkout's index file: (its content stamp, the commit it was seen to hold exactly).
_HOLDS: dict[str, tuple[tuple[int, bytes], str]] = {}
_MAX_HOLDS = 1024


async def holds(checkout: Checkout, commit: str, tree: str | None = None) -> bool:
    """Whether the checkout's own index holds exactly ``commit``'s tree (nothing staged).

    Known without git while the index file is the one seen to hold it (same content
    stamp); else ``write-tree`` (its cache-tree makes it cheap) against the commit's tree,
    remembered only when the index was the same file before and after (another git may
    write it meanwhile; a first write-tree may add its cache-tree, so it is asked twice).
    ``tree``: the commit's tree, when the caller has it already."""
    own = checkout.dirs.git_dir / "index"
    if _HOLDS.get(str(own)) == (stamp(own), commit):
        return True
    tree = tree or await _tree(checkout, commit)
    for _ in range(2):
        before = stamp(own)
        written = await checkout.run(["write-tree"], check=False)
        if written.returncode != 0 or written.text.strip() != tree:
            return False
        if before is not None and stamp(own) == before:
            _remember(own, before, commit)  # the index git read is the one of this stamp
            return True
    return False  # changing under us: unsure, so the caller brings the whole index up


async def vouch(checkout: Checkout, head: str | None, scanned: str, started_ns: int) -> None:
    """After a whole scan of the worktree begun at ``started_ns`` (every racily clean entry
    hashed, every other trusted only by stat data git checked) found ``scanned``, HEAD's
    tree: when the own index holds HEAD's tree too, each of its entries names the content
    its file had when the scan read it, so none is clean by stat data alone while holding
    other content. The index's mtime is then moved to the scan's start (never back), which
    is what tells git its older entries are not racy: the next write of it (the landing's)
    hashes none of them again, while a file written since the scan began stays racy. Touches
    nothing when unsure: another git holds the index's lock, the index changed meanwhile, it
    does not hold HEAD, or git is told to trust less than mtime and ctime
    (``core.trustctime=false``, ``core.checkStat=minimal``: an edit given its mtime back
    would then pass for clean).

    The scan must be of the files the index describes (a run's first checkpoint reads the
    layer under its overlay, which no write from the sandbox reaches)."""
    if head is None or await _tree(checkout, head) != scanned:
        return  # HEAD's tree is then ``scanned``
    trust = await checkout.run(
        ["config", "--get-regexp", r"^core\.(trustctime|checkstat)$"], check=False
    )
    for line in trust.text.splitlines():
        _, _, value = line.partition(" ")
        if value.strip().lower() in ("false", "no", "off", "0", "minimal"):
            return
    if not await holds(checkout, head, scanned):
        return
    own = checkout.dirs.git_dir / "index"
    seen = stamp(own)
    lock = own.with_name("index.lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError:
        return  # another git is writing it (or the dir is not ours to write): leave it
    try:
        held = seen is not None and stamp(own) == seen and _HOLDS.get(str(own)) == (seen, head)
        if held and started_ns > own.stat().st_mtime_ns:
            os.utime(own, ns=(started_ns, started_ns))
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()


def _remember(own: Path, seen: tuple[int, bytes], commit: str) -> None:
    if len(_HOLDS) >= _MAX_HOLDS:
        _HOLDS.clear()
    _HOLDS[str(own)] = (seen, commit)


async def _tree(checkout: Checkout, commit: str) -> str:
    """``commit``'s tree (in-process; ``git rev-parse`` when libgit2 cannot)."""
    try:
        return tree_of(checkout.dirs.common_dir, commit)
    except InProcessUnavailable:
        peeled = f"{commit}^{{tree}}"
        out = await checkout.run(["rev-parse", "--verify", "--end-of-options", peeled])
        return out.text.strip()
