"""The bwrap command line of a run: namespaces, binds, caps, environment and the uid drop.

Built per start from the backend's fixed options (``BwrapArgs.base``) and the request; the
options go to bwrap through a memfd (``args_fd``), so /proc/1/cmdline inside shows none.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from synthorg.logging import get_logger
from synthorg.sandbox.bwrap_layout import (
    HOME,
    INSIDE_DIR,
    RUNTIME_DIR,
    SOCKET_DIR,
    STATE,
    WORKSPACE,
    host_python_dir,
    library_path,
    python_in_sandbox,
)
from synthorg.sandbox.errors import SandboxStartError
from synthorg.sandbox.identity import (
    IdentityMode,
    SandboxIdentity,
    grant_read,
    grant_socket,
    grant_tree,
)
from synthorg.sandbox.protocol import SandboxRequest
from synthorg.sandbox.views import PYTHON_DIR

log = get_logger(__name__)

_USR_LINKS = ("bin", "lib", "lib64", "lib32", "libx32", "sbin")
#: Without --unshare-user: as root a user namespace would only map root to root, and the
#: drop to the sandbox user needs that user to exist in the namespace (the host's).
_UNSHARE_PRIVILEGED = (
    "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"
)  # fmt: skip
#: Kept only for setpriv's drop to the sandbox user; it clears them all before exec.
_DROP_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")


class Views:
    """Per run: the neutral source of each runtime bind, and where the state dir moved."""

    def __init__(self) -> None:
        self.runtime: dict[Path, Path] = {}
        self.state: Path | None = None


class BwrapArgs:
    """The options of every start of one backend, and a request's own on top of them."""

    def __init__(
        self,
        bwrap: str,
        setpriv: str | None,
        identity: SandboxIdentity,
        python_source: Path,
        overlay: Path,
        files: list[tuple[Path, str]],
    ) -> None:
        self._bwrap = bwrap
        self._setpriv = setpriv
        self.identity = identity
        self._python_source = python_source
        self._overlay = overlay
        self._files = files
        self.base = self._static()

    def _static(self) -> list[str]:
        mode = self.identity.mode
        args = ["--unshare-all"] if mode is IdentityMode.UNPRIVILEGED else [*_UNSHARE_PRIVILEGED]
        args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if mode is IdentityMode.DROPPED:
            for cap in _DROP_CAPS:
                args += ["--cap-add", cap]
        args += ["--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
        for name in _USR_LINKS:
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), str(host)]
            elif host.is_dir():
                args += ["--ro-bind", str(host), str(host)]
        # /etc's files and the helper scripts are copied in per start (build): no mount
        # whose source names the staging dir. /etc/alternatives is shown as itself.
        args += ["--perms", "0755", "--dir", "/etc"]
        if Path("/etc/alternatives").is_dir():
            args += ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
        args += ["--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", "/run"]
        args += ["--perms", "0755", "--dir", SOCKET_DIR, "--perms", "0755", "--dir", INSIDE_DIR]
        args += ["--ro-bind", str(self._python_source), PYTHON_DIR]
        args += ["--dev", "/dev", "--proc", "/proc"]
        # Kernel knobs stay read-only whoever runs inside (root mode included).
        args += ["--ro-bind", "/proc/sys", "/proc/sys"]
        args += ["--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger"]
        return args

    def drop_prefix(self) -> list[str]:
        """setpriv in front of the program: the sandbox user, no groups, no caps, no suid."""
        if self.identity.mode is not IdentityMode.DROPPED:
            return []
        assert self._setpriv is not None
        ident = self.identity
        return [
            self._setpriv,
            f"--reuid={ident.uid}",
            f"--regid={ident.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]

    def build(
        self,
        request: SandboxRequest,
        fds: list[int],
        links: Path | None = None,
        views: Views | None = None,
    ) -> tuple[list[str], list[str]]:
        """The bwrap options (without the control fds) and the argv run inside, for a request.

        Opens the staged files copied in (appended to fds: the caller passes and closes
        them). Hands the worktree and state dir to the sandbox user. With links (a fresh
        per-run dir), forwarded sockets are bound from hard links there, and with views the
        state dir and runtime binds from neutral sources (views.py), so the bind sources that
        /proc/self/mountinfo shows inside carry no host path or id.
        """
        views = views or Views()
        args = [self._bwrap, *self.base]
        for source, inside in self._files:
            fds.append(os.open(source, os.O_RDONLY | os.O_CLOEXEC))
            args += ["--perms", "0644", "--file", str(fds[-1]), inside]
        size = request.limits.tmp_bytes
        args += ["--size", str(size), "--perms", "1777", "--tmpfs", "/tmp"]
        args += ["--perms", "0777", "--dir", HOME]
        made = {Path("/"), Path("/tmp")}
        # A venv's base interpreter is shown at PYTHON_DIR, where its farm points; only a venv
        # bound from its host path (no farm) needs the interpreter at its host path too.
        farmed = all(bind in views.runtime for bind in request.runtime_binds)
        for bind in request.read_only_binds:
            if not bind.exists():
                raise SandboxStartError(f"read-only bind {bind} does not exist on this host")
            if farmed and bind.resolve() == host_python_dir():
                continue
            grant_read(bind, self.identity)
            args += [*traversable_parents(bind, made), "--ro-bind", str(bind), str(bind)]
        if request.runtime_binds:
            args += ["--perms", "0755", "--dir", RUNTIME_DIR]
        for index, bind in enumerate(request.runtime_binds):
            source = views.runtime.get(bind, bind)
            if not source.is_dir():
                raise SandboxStartError(f"runtime bind {bind} is not a directory on this host")
            grant_read(source, self.identity)
            args += ["--ro-bind", str(source), f"{RUNTIME_DIR}/{index}"]
        if not request.workspace.is_dir():
            raise SandboxStartError(f"workspace {request.workspace} is not a directory")
        args += ["--bind", str(request.workspace), WORKSPACE]  # handed over by the caller
        args += self._dotgit_cover(request.workspace, fds)
        if request.state_dir is not None:
            state = views.state or request.state_dir
            state.mkdir(parents=True, exist_ok=True)
            grant_tree(state, self.identity, keep_top=False)
            args += ["--bind", str(state), STATE]
        forwards: list[str] = []
        for ep in request.endpoints:
            if not ep.host_socket.exists():
                raise SandboxStartError(
                    f"endpoint {ep.name!r}: no socket at {ep.host_socket}; is the service running?"
                )
            grant_socket(ep.host_socket, self.identity)
            inside = f"{SOCKET_DIR}/{ep.name}.sock"
            args += ["--ro-bind", str(neutral_link(ep.host_socket, ep.name, links)), inside]
            forwards += ["--forward", f"{ep.sandbox_port}={inside}"]
        args += ["--chdir", WORKSPACE, "--remount-ro", "/", "--clearenv"]
        path = f"{PYTHON_DIR}/bin:/usr/local/bin:/usr/bin:/bin"
        env = {"PATH": path, "HOME": HOME, "LANG": "C.UTF-8", **library_path(), **request.env}
        for key, value in env.items():
            args += ["--setenv", key, value]
        argv = request.argv
        if forwards:  # the launcher is only needed (and only paid for) with endpoints
            launcher = [python_in_sandbox(), "-I", "-S", f"{INSIDE_DIR}/launcher.pyc"]
            argv = [*launcher, *forwards, "--", *argv]
        return args, [*self.drop_prefix(), *argv]

    def _dotgit_cover(self, workspace: Path, fds: list[int]) -> list[str]:
        """Cover a worktree's ``.git`` file inside with a read-only neutral one (after the
        workspace bind, inside the sandbox's mount namespace only: the host's file, and the
        quota image's copy, stay what git wrote). The real one names the user's repository
        path, and the agent could otherwise replace it (host git would then refuse the
        worktree). A bind-mount target cannot be written, removed or renamed from inside.

        A ``.git`` directory (a plain repository edited in place: no host git runs there) and
        a symlink (refused by host git anyway; bwrap would follow it) are left as they are.
        """
        dotgit = workspace / ".git"
        try:
            mode = dotgit.lstat().st_mode
        except FileNotFoundError:
            return []
        if not stat.S_ISREG(mode):
            return []
        # A copy bwrap makes on its own tmpfs: the mount's source names no staging dir.
        fds.append(os.open(self._overlay / "dotgit", os.O_RDONLY | os.O_CLOEXEC))
        return ["--perms", "0444", "--ro-bind-data", str(fds[-1]), f"{WORKSPACE}/.git"]


def traversable_parents(path: Path, made: set[Path]) -> list[str]:
    """``--dir`` options making path's missing parents 0755 inside (bwrap makes them 0700,
    which the dropped sandbox user could not traverse); records them in made."""
    args: list[str] = []
    for parent in reversed(path.parents):
        if parent not in made:
            made.add(parent)
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def args_fd(args: list[str]) -> int:
    """A memfd holding NUL-separated bwrap options, for ``bwrap --args FD``."""
    fd = os.memfd_create("synthorg-bwrap-args", os.MFD_CLOEXEC)
    os.write(fd, b"".join(a.encode() + b"\0" for a in args))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def neutral_link(socket: Path, name: str, links: Path | None) -> Path:
    """A hard link to socket in the per-run links dir (same inode, neutral path).

    Falls back to the socket's own path when the links dir is on another filesystem.
    """
    if links is None:
        return socket
    link = links / f"{name}.sock"
    try:
        os.link(socket, link, follow_symlinks=False)
    except OSError as exc:
        log.warning("sandbox.socket_link_failed", socket=str(socket), error=str(exc))
        return socket
    return link
