"""The host's verified handle on a worktree: the recorded git dirs, checked, and nothing else.

Everything in a worktree is written by the agent, its ``.git`` file included. Host code
therefore never lets git discover a repository from the worktree: it names the git dir, the
common dir and the work tree recorded at creation, refuses a worktree whose ``.git`` file or
repository no longer matches that record, and disarms every filter driver git would see.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from synthorg.workspace.errors import NotAGitWorkspaceError, WorkspaceTamperedError
from synthorg.workspace.git import (
    CheckoutDirs,
    GitOutput,
    control_config,
    driver_overrides,
    run_git,
    run_git_retrying,
)
from synthorg.workspace.models import Workspace

_MAX_DOTGIT = 4096


def _identity_file(common_dir: Path) -> Path:
    return common_dir / "synthorg" / "repository-id"


def repo_identity(common_dir: Path) -> str:
    """The repository's identity: a random id SynthOrg keeps in its shared git dir, plus the
    dir's device and inode. A repository deleted and re-created (or re-cloned) at the same
    path has another (inode numbers alone are reused; root commits repeat in a clone)."""
    path = _identity_file(common_dir)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{secrets.token_hex(8)}")
        tmp.write_text(secrets.token_hex(16), encoding="ascii")
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # atomic: the first creator wins, nobody reads a partial id
        tmp.unlink()
    return _current_identity(common_dir) or "unreadable"


def _current_identity(common_dir: Path) -> str | None:
    """The identity as it is on disk now (None when the repository has none or is gone)."""
    try:
        st = os.stat(common_dir)
        token = _identity_file(common_dir).read_text(encoding="ascii").strip()
    except OSError:
        return None
    return f"{token}:{st.st_dev}:{st.st_ino}" if token else None


def dotgit_text(git_dir: Path) -> bytes:
    """What git writes into a linked worktree's ``.git`` file for ``git_dir``."""
    return f"gitdir: {git_dir}\n".encode()


def _read_small(path: Path) -> bytes | None:
    """A regular file's bytes (never through a symlink, never more than a few KiB)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _MAX_DOTGIT + 1)
    finally:
        os.close(fd)


def verify(ws: Workspace) -> CheckoutDirs:
    """The recorded dirs of ``ws`` once they are checked against the disk, else a refusal."""
    if not ws.is_worktree or ws.git_dir is None or ws.common_dir is None:
        raise NotAGitWorkspaceError(
            f"workspace {ws.path} is not a git checkout SynthOrg made ({ws.note or 'in place'}); "
            "git views, checkpoints and the commit gate need a worktree"
        )
    where = f"the worktree {ws.path} of conversation {ws.conversation_id}"
    try:
        top = os.lstat(ws.path)
    except OSError:
        raise WorkspaceTamperedError(f"{where} no longer exists; nothing was run") from None
    if not stat.S_ISDIR(top.st_mode):
        raise WorkspaceTamperedError(f"{where} is no longer a directory; nothing was run")
    found = _read_small(ws.path / ".git")
    if found != dotgit_text(ws.git_dir):
        seen = "missing or not a regular file" if found is None else repr(found[:120])
        raise WorkspaceTamperedError(
            f"{where}: its .git file changed (recorded {dotgit_text(ws.git_dir)!r}, found "
            f"{seen}); host git will not touch it. Nothing was run or committed; inspect the "
            "worktree, then delete the conversation"
        )
    if ws.repo_identity is not None and _current_identity(ws.common_dir) != ws.repo_identity:
        raise WorkspaceTamperedError(
            f"{where}: the repository {ws.repo or ws.common_dir} was deleted and re-created "
            "(or re-cloned) since the conversation began; its branch and base are gone. "
            "Start a new conversation"
        )
    back = _read_small(ws.git_dir / "gitdir")
    if back is None or back.strip() != os.fsencode(ws.path / ".git"):
        raise WorkspaceTamperedError(
            f"{where}: git no longer registers it at {ws.git_dir}; nothing was run"
        )
    return CheckoutDirs(work_tree=ws.path, git_dir=ws.git_dir, common_dir=ws.common_dir)


@dataclass(frozen=True, slots=True)
class Checkout:
    """A verified worktree: every git call names its recorded dirs and disarms drivers."""

    ws: Workspace
    dirs: CheckoutDirs
    overrides: tuple[tuple[str, str], ...]

    async def run(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        check: bool = True,
    ) -> GitOutput:
        """``git <args>`` on this checkout."""
        return await run_git(
            args,
            self.dirs.work_tree,
            env=env,
            stdin=stdin,
            check=check,
            checkout=self.dirs,
            overrides=self.overrides,
        )

    async def run_retrying(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
    ) -> GitOutput:
        """``git <args>`` on this checkout, retrying lock races (idempotent calls only)."""
        return await run_git_retrying(
            args,
            self.dirs.work_tree,
            env=env,
            stdin=stdin,
            checkout=self.dirs,
            overrides=self.overrides,
        )


async def open_checkout(ws: Workspace) -> Checkout:
    """Verify ``ws`` and learn which filter drivers to disarm (config is read, never run)."""
    dirs = verify(ws)
    return Checkout(ws=ws, dirs=dirs, overrides=await _disarmed_drivers(dirs))


# Per checkout: the config files git read (with their stat signature) and the overrides they
# called for. Listing config costs a git process per operation; its files rarely change.
_Overrides = tuple[tuple[str, str], ...]
_DRIVERS: dict[tuple[Path, Path], tuple[tuple[Path, ...], tuple[object, ...], _Overrides]] = {}
_MAX_CACHED = 256


def _signature(files: tuple[Path, ...]) -> tuple[object, ...]:
    out: list[object] = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


# Per shared git dir: its config's signature and overrides, from a listing that named no
# include and no worktree config. Git then read nothing that depends on the worktree, so
# every new worktree of the repository (one per run) has the same drivers: no listing.
_SHARED: dict[Path, tuple[tuple[object, ...], _Overrides]] = {}
_INCLUDES = ("include.", "includeif.")


async def _disarmed_drivers(dirs: CheckoutDirs) -> _Overrides:
    """Overrides for every filter driver git would see in this checkout's configuration."""
    key = (dirs.git_dir, dirs.common_dir)
    cached = _DRIVERS.get(key)
    if cached is not None and _signature(cached[0]) == cached[1]:
        return cached[2]
    base = (dirs.common_dir / "config", dirs.git_dir / "config.worktree")
    before = _signature(base)
    shared = _SHARED.get(dirs.common_dir)
    if shared is not None and before[1] is None and before[:1] == shared[0]:
        return shared[1]
    listed = await run_git(
        ["config", "--list", "--show-origin", "--name-only", "-z"],
        dirs.work_tree,
        checkout=dirs,
        check=False,
    )
    tokens = listed.text.split("\0") if listed.returncode == 0 else []
    names = tokens[1::2]
    origins = {Path(t.removeprefix("file:")) for t in tokens[0::2] if t.startswith("file:")}
    overrides = tuple(driver_overrides(names))
    included = tuple(sorted(p for p in origins if p.is_absolute() and p not in base))
    # Stats taken before listing: a file changed meanwhile differs next time and is re-read.
    if len(_DRIVERS) >= _MAX_CACHED:
        _DRIVERS.clear()
    _DRIVERS[key] = (base + included, before + _signature(included), overrides)
    own = control_config()  # the global config: this process's, the same for every worktree
    if (
        before[1] is None
        and all(path == own for path in included)
        and not any(n.startswith(_INCLUDES) for n in names)
    ):
        if len(_SHARED) >= _MAX_CACHED:
            _SHARED.clear()
        _SHARED[dirs.common_dir] = (before[:1], overrides)
    return overrides
