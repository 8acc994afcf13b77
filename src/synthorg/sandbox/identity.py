"""Who the sandbox runs as on the host, and handing it the worktree and state dir it may write.

Run as root, the bwrap backend drops every sandboxed program to a dedicated unprivileged
host user (``synthorg-sandbox``, made by ``scripts/bootstrap.sh``): what it reaches of the
host is what that uid may reach (no /proc/sys write, no root-only file). It sees the worktree
as its own through an idmapped mount (idmap.py), and what it wrote lands on the host
worktree as the host's (``host_owner``); only without a quota, or where the kernel cannot
idmap, is the tree chowned to it (``grant_tree``). Running sandboxes as host root needs an explicit,
loud opt-in. Run as an ordinary user, bwrap itself is unprivileged (a user namespace) and
the sandbox runs as that user: never root either.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from synthorg.sandbox.errors import SandboxStartError, SandboxUnavailableError

DEFAULT_USER = "synthorg-sandbox"
#: Operator overrides: the user (name or uid) and the explicit opt-in to host root.
USER_ENV = "SYNTHORG_SANDBOX_USER"
ALLOW_ROOT_ENV = "SYNTHORG_SANDBOX_ALLOW_ROOT"


class IdentityMode(StrEnum):
    """How the sandbox's uid relates to the host."""

    DROPPED = "dropped"
    """Host root starts bwrap; the program inside runs as the sandbox user."""
    UNPRIVILEGED = "unprivileged"
    """An ordinary user starts bwrap (user namespace); the program runs as that user."""
    ROOT = "root"
    """Explicit opt-in: the program inside is host root (capabilities dropped)."""


@dataclass(frozen=True)
class SandboxIdentity:
    """The host uid/gid every sandboxed program runs as, and how it got there."""

    mode: IdentityMode
    uid: int
    gid: int
    name: str

    @property
    def describe(self) -> str:
        """One phrase for boundary tables and doctor."""
        if self.mode is IdentityMode.ROOT:
            return "runs as HOST ROOT (explicit opt-in); capabilities dropped"
        how = "dropped from root to" if self.mode is IdentityMode.DROPPED else "runs as"
        return f"{how} host uid {self.uid} ({self.name}), not root"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def _lookup(user: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        return None


def resolve_identity(user: str | None = None, *, allow_root: bool | None = None) -> SandboxIdentity:
    """The identity sandboxes get on this host; fails loud when root has no user to drop to."""
    euid = os.geteuid()
    if euid != 0:
        entry = _lookup(str(euid))
        return SandboxIdentity(
            IdentityMode.UNPRIVILEGED, euid, os.getegid(), entry.pw_name if entry else str(euid)
        )
    allow_root = _env_flag(ALLOW_ROOT_ENV) if allow_root is None else allow_root
    wanted = user if user is not None else os.environ.get(USER_ENV, DEFAULT_USER)
    entry = _lookup(wanted) if wanted else None
    if entry is not None and entry.pw_uid != 0:
        return SandboxIdentity(IdentityMode.DROPPED, entry.pw_uid, entry.pw_gid, entry.pw_name)
    if allow_root:
        return SandboxIdentity(IdentityMode.ROOT, 0, 0, "root")
    raise SandboxUnavailableError(
        f"running as root, the sandbox drops to the unprivileged user {wanted or DEFAULT_USER!r}, "
        "which does not exist: run scripts/bootstrap.sh as root (or `useradd --system "
        f"--user-group --no-create-home {DEFAULT_USER}`), or name another user with "
        f"{USER_ENV}; {ALLOW_ROOT_ENV}=1 runs sandboxes as host root (unsafe)"
    )


def host_owner() -> tuple[int, int]:
    """Who owns what lands on the host worktree: the control plane's own ids (root, when
    sandboxes run as their own user), never the sandbox user's or what the agent chose."""
    return os.geteuid(), os.getegid()


def grant_top(root: Path, identity: SandboxIdentity) -> None:
    """Make root itself (not its tree) usable by the sandbox's group: its owner stays (host
    git checks who owns the worktree), the group becomes the sandbox's with rwx."""
    if identity.mode is not IdentityMode.DROPPED:
        return
    try:
        _grant_top(root, _top(root), identity.gid)
    except OSError as exc:
        raise SandboxStartError(f"cannot hand {root} to the sandbox user: {exc}") from exc


def grant_tree(root: Path, identity: SandboxIdentity, *, keep_top: bool) -> None:
    """Make root's tree writable by the sandbox uid (chown, never following a symlink).

    With keep_top, root itself and its ``.git`` entry keep their owner (``grant_top``).
    Walks with directory fds (os.fwalk), so a symlink planted in the tree is chowned itself
    and never followed. Call it while no sandbox of this tree runs (at start-up, after a
    host-side write such as a rollback). A worktree under an idmapped quota is not walked
    at all (idmap.py); this is the fallback and the pooled slot's image.
    """
    if identity.mode is not IdentityMode.DROPPED:
        return  # unprivileged: the tree is already the user's; root mode: root owns it
    owner = identity.uid, identity.gid
    try:
        top = _top(root)
        if keep_top:
            _grant_top(root, top, identity.gid)
        elif (top.st_uid, top.st_gid) != owner:
            os.chown(root, *owner, follow_symlinks=False)
        _chown_walk(root, top, owner, skip_git=keep_top)
    except OSError as exc:
        raise SandboxStartError(f"cannot hand {root} to the sandbox user: {exc}") from exc


def reclaim_tree(root: Path, identity: SandboxIdentity) -> bool:
    """Give the host back a worktree an earlier ``grant_tree`` handed to the sandbox user
    (before an idmapped start, which maps only the host owner's ids): whether it walked.

    A walk hands over the whole tree, its top entries too, and nothing else writes the
    sandbox user's ids onto the host tree (upper.py and copyback.py land what the sandbox
    wrote as ``host_owner``), so the top dir's entries tell whether a walk is owed: a tree
    the control plane made and only ever idmapped is not walked.
    """
    if identity.mode is not IdentityMode.DROPPED:
        return False
    try:
        top = _top(root)
        with os.scandir(root) as listing:
            handed = any(
                entry.name != ".git" and entry.stat(follow_symlinks=False).st_uid == identity.uid
                for entry in listing
            )
        if handed:
            _chown_walk(root, top, host_owner(), skip_git=True)
    except OSError as exc:
        raise SandboxStartError(f"cannot take {root} back from the sandbox user: {exc}") from exc
    return handed


def _top(root: Path) -> os.stat_result:
    top = os.lstat(root)
    if not stat.S_ISDIR(top.st_mode):
        raise SandboxStartError(f"{root} is not a directory")
    return top


def _grant_top(root: Path, top: os.stat_result, gid: int) -> None:
    if top.st_gid != gid:
        os.chown(root, -1, gid, follow_symlinks=False)
    if top.st_mode & stat.S_IRWXG != stat.S_IRWXG:
        # the sandbox group gets rwx on the top dir only (owner stays for host git)
        os.chmod(root, stat.S_IMODE(top.st_mode) | stat.S_IRWXG)  # noqa: S103


def _chown_walk(root: Path, top: os.stat_result, owner: tuple[int, int], *, skip_git: bool) -> None:
    """Every entry under root (not root itself; not its ``.git`` with skip_git) to owner."""
    uid, gid = owner
    for _, dirs, files, dirfd in os.fwalk(root, follow_symlinks=False):
        skip = ".git" if skip_git and _same_dir(dirfd, top) else None
        for name in (*dirs, *files):
            if name == skip:
                continue
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if st.st_uid != uid or st.st_gid != gid:
                os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)


def _same_dir(dirfd: int, top: os.stat_result) -> bool:
    st = os.fstat(dirfd)
    return st.st_ino == top.st_ino and st.st_dev == top.st_dev


def grant_socket(path: Path, identity: SandboxIdentity) -> None:
    """Let the sandbox's group connect to a host unix socket (root:<sandbox group> 0660)."""
    if identity.mode is not IdentityMode.DROPPED:
        return
    try:
        st = os.lstat(path)
        if not stat.S_ISSOCK(st.st_mode):
            raise SandboxStartError(f"{path} is not a unix socket")
        if st.st_gid != identity.gid or not st.st_mode & stat.S_IWGRP:
            os.chown(path, -1, identity.gid, follow_symlinks=False)
            os.chmod(path, 0o660)
    except OSError as exc:
        raise SandboxStartError(f"cannot let the sandbox user reach {path}: {exc}") from exc


def grant_read(path: Path, identity: SandboxIdentity) -> None:
    """Let the sandbox user enter a read-only bind's top dir (o+rx; its contents keep their
    modes). A runtime venv built in a private temp dir is 0700 at the top and nothing more."""
    if identity.mode is not IdentityMode.DROPPED:
        return
    try:
        st = os.stat(path)
        wanted = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
        if st.st_mode & wanted != wanted:
            os.chmod(path, stat.S_IMODE(st.st_mode) | wanted)
    except OSError as exc:
        raise SandboxStartError(f"cannot let the sandbox user read {path}: {exc}") from exc
