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
had just hashed the same files under the overlay.
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


async def holds(checkout: Checkout, commit: str) -> bool:
    """Whether the checkout's own index holds exactly ``commit``'s tree (nothing staged).

    Known without git while the index file is the one seen to hold it (same content
    stamp); else one ``write-tree`` (its cache-tree makes it cheap) against the commit's
    tree."""
    own = checkout.dirs.git_dir / "index"
    if _HOLDS.get(str(own)) == (stamp(own), commit):
        return True
    written = await checkout.run(["write-tree"], check=False)
    if written.returncode != 0:
        return False
    tree = await _tree(checkout, commit)
    if written.text.strip() != tree:
        return False
    _remember(own, commit)
    return True


async def vouch(checkout: Checkout, head: str | None, scanned: str) -> None:
    """After a whole scan of the worktree (every racily clean entry hashed, every other
    trusted only by stat data git checked) found ``scanned``, HEAD's tree: when the own
    index holds HEAD's tree too, each of its entries names the content its file has, so
    none is clean by stat data alone while holding other content. Its mtime is then moved
    to now, which is what tells git its entries are not racy: the next write of it (the
    landing's) hashes nothing again. Touches nothing when unsure: another git holds the
    index's lock, the index changed meanwhile, or it does not hold HEAD.

    The scan must be of the files the index describes, unchanged since (a run's first
    checkpoint reads the layer under its overlay, which no write reaches while the overlay
    covers the worktree)."""
    if head is None or await _tree(checkout, head) != scanned:
        return
    if not await holds(checkout, head):
        return
    own = checkout.dirs.git_dir / "index"
    seen = stamp(own)
    lock = own.with_name("index.lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError:
        return  # another git is writing it (or the dir is not ours to write): leave it
    try:
        if seen is not None and stamp(own) == seen and _HOLDS.get(str(own)) == (seen, head):
            os.utime(own)
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()


def _remember(own: Path, commit: str) -> None:
    seen = stamp(own)
    if seen is None:
        return
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
