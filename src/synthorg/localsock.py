"""The local operator's socket of ``synthorg serve``: where it lives and when to trust it.

``synthorg serve`` listens on ``SYNTHORG_HOME/run/serve.sock`` besides TCP, and ``synthorg
run`` hands its run there (as the docker CLI talks to dockerd). Whoever can connect is the
local operator, so the trust rests on three checks, all made by the kernel's own records:
the directory is ``0700`` and owned by the server's uid (no one else can reach, plant or
replace a file in it), the socket is owned by that uid, and each end asks SO_PEERCRED who
the other is (the server refuses any uid but its own and root's at accept; the client any
server but one of its own uid or root). Cheap to import: the CLI checks before it loads
anything else.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

CONNECT_TIMEOUT_S = 2.0
"""How long ``synthorg run`` waits for the kernel to accept its connection."""


def serve_socket(home: Path) -> Path:
    """Where the serve of data dir ``home`` listens for its local operator."""
    return home / "run" / "serve.sock"


def trusted_uids() -> frozenset[int]:
    """Who may be at the other end: this process's uid, and root (who can reach it anyway)."""
    return frozenset({os.getuid(), 0})


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected unix socket, as the
    kernel recorded them at ``connect()``/``listen()`` (the peer cannot choose them)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


class PrivateDirError(PermissionError):
    """A directory for sockets, keys or state that another uid controls (see private_dir)."""


def private_dir(path: Path) -> Path:
    """``path`` as a directory only this uid can enter or change; PermissionError saying
    which directory and why when it cannot be.

    The one rule for every directory the control plane puts a socket, key or state in,
    checked at every start: made 0700 when missing (narrowed to it when looser), this uid's,
    not a symlink; and every directory above it, as written and as resolved, a trusted uid's
    (this one or root) that nobody else may write in (sticky ones like /tmp aside: there only
    an entry's owner may rename it). Whoever can rename a directory on the way can put one of
    their own in its place, with their sockets or keys in it.
    """
    refusal = _ancestors_refusal(path)
    if refusal is not None:
        raise PrivateDirError(f"{path}: {refusal}")
    path.mkdir(exist_ok=True, mode=0o700)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise PrivateDirError(f"{path} is a symlink, not a directory of uid {os.getuid()}")
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PrivateDirError(
            f"{path} is not a directory owned by uid {os.getuid()} (uid {info.st_uid}): "
            "remove it, or choose another SYNTHORG_HOME"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def _ancestors_refusal(path: Path) -> str | None:
    """Why a directory above ``path`` lets another uid replace what is below it (None: it
    does not). Missing ones are made (0700), as ``mkdir -p`` would, and then checked."""
    parent = path.absolute().parent
    if not parent.exists():
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    uids = trusted_uids()
    groups = {os.getgid(), 0}
    resolved = Path(os.path.realpath(parent))
    for above in dict.fromkeys([parent, *parent.parents, resolved, *resolved.parents]):
        try:
            info = os.lstat(above)
        except OSError as exc:
            return f"cannot inspect {above}: {exc.strerror}"
        if info.st_uid not in uids:
            kind = "a symlink" if stat.S_ISLNK(info.st_mode) else "a directory"
            return f"{above} is {kind} of uid {info.st_uid}, not of uid {os.getuid()} or root"
        if stat.S_ISLNK(info.st_mode):
            continue  # a trusted uid's link: its target's chain is checked as resolved
        mode = stat.S_IMODE(info.st_mode)
        writable = mode & 0o002 or (mode & 0o020 and info.st_gid not in groups)
        if writable and not mode & stat.S_ISVTX:
            return f"others may write in {above} (mode {mode:o}): they could replace what is in it"
    return None


def untrusted_because(path: Path) -> str | None:
    """Why the socket at ``path`` must not be used (planted, reachable by others), or None."""
    uids = trusted_uids()
    try:
        folder = os.lstat(path.parent)
        sock = os.lstat(path)
    except OSError as exc:
        return f"cannot inspect it: {exc.strerror}"
    if not stat.S_ISDIR(folder.st_mode) or folder.st_uid not in uids:
        return f"{path.parent} is not a directory of uid {os.getuid()}"
    if stat.S_IMODE(folder.st_mode) & 0o022:
        return f"others may write in {path.parent} (mode {stat.S_IMODE(folder.st_mode):o})"
    if not stat.S_ISSOCK(sock.st_mode):
        return "it is not a socket"
    if sock.st_uid not in uids:
        return f"it belongs to uid {sock.st_uid}, not {os.getuid()}"
    return None


@dataclass(frozen=True, slots=True)
class Peer:
    """The serve process at the other end, as the kernel names it."""

    pid: int
    uid: int


def probe(path: Path, timeout: float = CONNECT_TIMEOUT_S) -> Peer:
    """Connect once and ask the kernel who listens: OSError when nobody does (ENOENT: no
    socket; ECONNREFUSED: a stale one a killed serve left), PermissionError for a peer of
    another uid."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        pid, uid, _ = peer_credentials(sock)
    if uid not in trusted_uids():
        raise PermissionError(f"the process listening on {path} runs as uid {uid}")
    return Peer(pid=pid, uid=uid)


@dataclass(frozen=True, slots=True)
class Found:
    """A serve of this data dir that answers on its local socket."""

    path: Path
    peer: Peer


def find_serve(home: Path) -> tuple[Found | None, str | None]:
    """The serve listening for ``home``'s operator, or None and why not (None: no socket)."""
    path = serve_socket(home)
    if not path.exists() and not path.is_symlink():
        return None, None
    refusal = untrusted_because(path)
    if refusal is not None:
        return None, f"refusing the serve socket {path}: {refusal}"
    try:
        peer = probe(path)
    except PermissionError as exc:
        return None, f"refusing the serve socket {path}: {exc}"
    except OSError as exc:
        why = "a stale socket: no serve is running" if not isinstance(exc, TimeoutError) else ""
        return None, f"no serve answers on {path} ({why or 'it did not accept in time'})"
    return Found(path=path, peer=peer), None
