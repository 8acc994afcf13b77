"""What a run's overlay changed in a worktree, as the kernel recorded it (sandbox → workspace).

A layered quota (sandbox/quota.py) mounts an overlay over the worktree for a run's life:
every write to the worktree's path while it is mounted, the run's or anyone else's, lands in
the overlay's upper layer, and the real tree below stays as it was. At release the upper is
applied back and the paths it named are recorded here under the mount's token. A scan of the
tree taken while that same mount was live, plus those paths, is then the whole tree as it now
is: the landing hashes what the run changed, not every file (workspace/snapshot.py).

Who controls what: the paths are the kernel's record of the agent's writes (the agent picks
the names, not whether a write is recorded); the token is ours. Anything unsure (an entry
the apply skipped, a record from another mount) leaves no record, and the caller scans all.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Released:
    """An overlay's release: its token, and every worktree path whose entry it may have
    changed (files, links, deletions, and directories that are new or replaced whole)."""

    token: str
    changed: frozenset[str]


_LOCK = threading.Lock()
_LIVE: dict[str, str] = {}  # worktree -> token of the overlay mounted over it now
_RELEASED: dict[str, Released] = {}  # worktree -> its last overlay's release, until taken


def _key(worktree: Path) -> str:
    return os.path.realpath(worktree)


def mounted(worktree: Path, token: str) -> None:
    """An overlay now covers ``worktree``: an earlier release's record no longer says it all."""
    with _LOCK:
        _LIVE[_key(worktree)] = token
        _RELEASED.pop(_key(worktree), None)


def live_token(worktree: Path) -> str | None:
    """The token of the overlay covering ``worktree`` now, if one of this process does."""
    with _LOCK:
        return _LIVE.get(_key(worktree))


def released(worktree: Path, token: str, changed: frozenset[str] | None) -> None:
    """The overlay ``token`` is gone and its upper applied; ``changed`` None when what it
    changed is not exactly known (then nothing is recorded)."""
    with _LOCK:
        for path in [path for path, live in _LIVE.items() if live == token]:
            del _LIVE[path]  # under the path it was mounted at, even if the tree moved since
        if changed is None:
            _RELEASED.pop(_key(worktree), None)
        else:
            _RELEASED[_key(worktree)] = Released(token, changed)


def take_released(worktree: Path) -> Released | None:
    """The last release's record for ``worktree``, once: whoever takes it lands it, and any
    later write to the tree is not in it."""
    with _LOCK:
        return _RELEASED.pop(_key(worktree), None)


def forget(worktree: Path) -> None:
    """Drop the release record (a host-side write or scan the record does not cover)."""
    with _LOCK:
        _RELEASED.pop(_key(worktree), None)
