"""How much host work a worktree may ask for: sizes and counts, checked before git hashes.

The agent owns the worktree, and the sandbox's quota counts blocks: a sparse file of 1 GiB
apparent size costs it nothing, yet ``git add`` reads and compresses all of it (three took the
host 52 CPU-s, six held a checkpoint for ~8 minutes), to be refused as oversize at landing.
So before any ``git add``, what it would hash is listed (``git ls-files``: a walk with the
ignore rules, no content read) and measured by apparent size (``lstat``): a file over the
gate's ``max_file_bytes`` is never hashed (the gate refuses it by that size), and more
changed files than ``max_changed_files`` are refused outright.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping, Sequence
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
    (not ignored) and modified ones; deleted ones too, which cost nothing and are skipped
    when measured."""
    args = ["ls-files", "-z", "--others", "--exclude-standard", "--modified"]
    if specs is not None:
        args = ["--literal-pathspecs", *args, "--", *specs]
    listed = await checkout.run(args, env=env)
    return sorted({p for p in listed.text.split("\0") if p})


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
