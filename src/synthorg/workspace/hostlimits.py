"""How much host work a worktree may ask for: sizes and counts, checked before git hashes.

The agent owns the worktree, and the sandbox's quota counts blocks: a sparse file of 1 GiB
apparent size costs it nothing, yet ``git add`` reads and compresses all of it (three took the
host 52 CPU-s, six held a checkpoint for ~8 minutes), to be refused as oversize at landing.
So before any ``git add``, what it would hash is listed (``git ls-files --others`` and
``git diff-files``: walks by the ignore rules and by stat data, no content read) and measured
by apparent size (``lstat``): a file over the
gate's ``max_file_bytes`` is never hashed (the gate refuses it by that size), and more
changed files than ``max_changed_files`` are refused outright.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from synthorg.workspace.checkout import Checkout
from synthorg.workspace.errors import TooManyFilesError

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
"""Largest file the gate commits (a run's build output or a disk-filling file is refused)."""

DEFAULT_MAX_CHANGED_FILES = 100_000
"""Most files one snapshot may add or change (a checkpoint, the NO_OP check, the gate)."""


@dataclass(frozen=True, slots=True)
class HostLimits:
    """The bounds one snapshot works within (the gate's, so nothing it refuses is hashed)."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_changed_files: int = DEFAULT_MAX_CHANGED_FILES


async def pending(
    checkout: Checkout, env: Mapping[str, str], specs: Sequence[str] | None = None
) -> list[str]:
    """The files ``git add -A [specs]`` would hash against the index of ``env``: untracked
    (not ignored) ones and those whose stat data differ from their entries; deleted ones
    too, which cost nothing and are skipped when measured.

    Judged by stat data alone (``_stat_judged``): listing by content, git would hash every
    racily clean entry (a file written in the second its index was: tens of thousands after
    a big checkout, ~200 ms at 100,000 files) only for ``add`` to hash them again. An entry
    whose stat data match has its entry's size, so leaving it out lets nothing past the size
    bound; ``add`` still compares its content."""
    # Two walks at once: the untracked files, and the entries whose stat data differ
    # (``diff-files`` lstat()s them in parallel; ``ls-files --modified`` one by one, ~2x
    # slower at 100,000 entries). A submodule's own work tree is not asked about (that
    # runs a git in a nested repository the agent may have written), but a gitlink whose
    # path is now a file is listed (``=dirty``, not ``=all``, which hid such a file from
    # the size check: the red team's finding, tests/workspace/test_redteam_pending.py).
    literal = ["--literal-pathspecs"] if specs is not None else []
    tail = ["--", *specs] if specs is not None else []
    others = [*literal, "ls-files", "-z", "--others", "--exclude-standard", *tail]
    changed = [
        *literal,
        *("-c", "core.preloadIndex=true"),
        *("diff-files", "--name-only", "-z", "--ignore-submodules=dirty", *tail),
    ]
    index = Path(env.get("GIT_INDEX_FILE") or checkout.dirs.git_dir / "index")
    with _stat_judged(index) as judged:
        judged_env = {**env, "GIT_INDEX_FILE": str(judged)}
        try:
            async with asyncio.TaskGroup() as group:
                untracked = group.create_task(checkout.run(others, env=judged_env))
                modified = group.create_task(checkout.run(changed, env=judged_env))
        except ExceptionGroup as failed:  # the first failure, as one git would raise it
            raise failed.exceptions[0] from None
    listed = untracked.result().text + "\0" + modified.result().text
    return sorted({p for p in listed.split("\0") if p})


@contextmanager
def _stat_judged(index: Path) -> Iterator[Path]:
    """A copy of ``index`` that git reads with no entry racily clean: its mtime is moved
    past every entry's, so each is judged by its stat data (read only, then removed)."""
    if not index.is_file():
        yield index  # no index yet: git lists every file as untracked, hashing none
        return
    fd, name = tempfile.mkstemp(prefix=f".{index.name}.", suffix=".stat", dir=index.parent)
    os.close(fd)
    copy = Path(name)
    try:
        shutil.copyfile(index, copy)
        os.utime(copy, (_FAR_FUTURE_S, _FAR_FUTURE_S))
        yield copy
    finally:
        copy.unlink(missing_ok=True)


_FAR_FUTURE_S = 2**31 - 1
"""An index mtime no entry's reaches (git's racy check: entry mtime >= index mtime)."""


def oversize(root: Path, paths: Iterable[str], limits: HostLimits) -> list[tuple[str, int]]:
    """(path, apparent size) of the regular files among ``paths`` over the size limit;
    raises TooManyFilesError past the count limit. Never reads a file, never follows one."""
    listed = list(paths)
    if len(listed) > limits.max_changed_files:
        raise TooManyFilesError(len(listed), limits.max_changed_files)
    found = []
    for rel in listed:
        try:
            st = os.lstat(root / rel)
        except OSError:
            continue  # deleted (or never there): git records the deletion, hashes nothing
        if stat.S_ISREG(st.st_mode) and st.st_size > limits.max_file_bytes:
            found.append((rel, st.st_size))
    return found


def without(specs: Sequence[str], excluded: Iterable[tuple[str, int]]) -> list[str]:
    """Pathspecs for ``git add -A`` (no --literal-pathspecs) of ``specs`` but ``excluded``."""
    return [*(f":(literal){s}" for s in specs), *(f":(exclude,literal){p}" for p, _ in excluded)]
