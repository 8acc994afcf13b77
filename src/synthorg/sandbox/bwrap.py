"""The bubblewrap backend: namespaces, pinned egress, cgroup/rlimit caps, pid-1 teardown."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import py_compile
import resource
import secrets
import shutil
import signal
import stat
import sys
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from synthorg.logging import get_logger
from synthorg.sandbox.boundary import bwrap_boundary
from synthorg.sandbox.cgroups import (
    CgroupMode,
    CgroupSupport,
    RunCgroup,
    detect_cgroups,
    sweep_stale,
)
from synthorg.sandbox.errors import SandboxIOError, SandboxStartError, SandboxUnavailableError
from synthorg.sandbox.identity import (
    IdentityMode,
    SandboxIdentity,
    grant_read,
    grant_socket,
    grant_tree,
    resolve_identity,
)
from synthorg.sandbox.process import STREAM_LIMIT, ManagedProcess, Verdicts, start_uncancellable
from synthorg.sandbox.protocol import (
    BoundaryDeclaration,
    SandboxLimits,
    SandboxProcess,
    SandboxRequest,
)
from synthorg.sandbox.quota import WorkspaceQuota, unavailable_reason
from synthorg.sandbox.quota import sweep_stale as sweep_quotas
from synthorg.sandbox.seccomp import filter_program, program_fd
from synthorg.sandbox.views import (
    PYTHON_DIR,
    MovedState,
    base_python_dir,
    link_farm,
    same_filesystem,
    staging_dir,
)
from synthorg.sandbox.views import sweep_stale as sweep_views

log = get_logger(__name__)

WORKSPACE = "/workspace"
STATE = "/state"
HOME = "/tmp/home"
_INSIDE_DIR = "/opt/synthorg"
RUNTIME_DIR = "/opt/runtime"
"""Runtime binds appear at /opt/runtime/<index> inside."""
_SOCKET_DIR = "/run/synthorg"
_PACKAGE_DIR = Path(__file__).resolve().parent
_START_TIMEOUT_S = 10.0
_ETC_FILES = ("passwd", "group", "nsswitch.conf", "ld.so.cache", "localtime")
_SCRIPTS = ("launcher.py", "toolbox.py")
_USR_LINKS = ("bin", "lib", "lib64", "lib32", "libx32", "sbin")
_HOSTS = "127.0.0.1 localhost\n::1 localhost\n"
#: What the sandbox sees as a worktree's ``.git`` file: it names no host path, and git
#: inside fails on it exactly as it did on the real one (whose git dir is not mounted).
NEUTRAL_DOTGIT = "gitdir: /nonexistent/synthorg-host-git\n"
#: Without --unshare-user: as root a user namespace would only map root to root, and the
#: drop to the sandbox user needs that user to exist in the namespace (the host's).
_UNSHARE_PRIVILEGED = (
    "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"
)  # fmt: skip
#: Kept only for setpriv's drop to the sandbox user; it clears them all before exec.
_DROP_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")


def _prepare_overlay() -> tuple[Path, int, list[tuple[Path, str]]]:
    """A host-only staging dir (views.staging_dir) and its lock fd, and the files the sandbox
    gets as copies (``--file``: no mount, so mountinfo names no staging path): (staged
    file, path inside). Also a dir for per-run socket links and the neutral ``.git``."""
    root, lock_fd = staging_dir()
    (root / "links").mkdir(mode=0o700)  # per-run hard links of forwarded sockets
    files: list[tuple[Path, str]] = []
    for name in _ETC_FILES:
        source = Path("/etc") / name
        if source.is_file():  # a symlink's target (localtime)
            shutil.copyfile(source, root / name)
            files.append((root / name, f"/etc/{name}"))
    (root / "hosts").write_text(_HOSTS)
    files.append((root / "hosts", "/etc/hosts"))
    (root / "dotgit").write_text(NEUTRAL_DOTGIT)
    for script in _SCRIPTS:
        # Bytecode, compiled once here: a script named on the command line is compiled from
        # source at every start (~3 ms of the toolbox's CPU per run), a .pyc is not. The
        # sandbox runs the host's base interpreter, so the bytecode's version matches; its
        # code names the path inside, never the staging dir.
        compiled = root / f"{script}c"
        py_compile.compile(
            str(_PACKAGE_DIR / script),
            cfile=str(compiled),
            dfile=f"{_INSIDE_DIR}/{script}",
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        files.append((compiled, f"{_INSIDE_DIR}/{script}c"))
    return root, lock_fd, files


def _remove_overlay(root: Path, lock_fd: int) -> None:
    shutil.rmtree(root, ignore_errors=True)
    os.close(lock_fd)


def host_python_dir() -> Path:
    """The host interpreter's install dir (shown read-only at PYTHON_DIR inside)."""
    return base_python_dir()


def _python_name() -> str:
    return f"python{sys.version_info.major}.{sys.version_info.minor}"


def host_python() -> str:
    """The base interpreter (not a venv shim) on the host (the local backend's)."""
    candidate = host_python_dir() / "bin" / _python_name()
    return str(candidate if candidate.exists() else Path(sys.executable).resolve())


def python_in_sandbox() -> str:
    """The base interpreter as a bwrap sandbox sees it (its install dir at PYTHON_DIR)."""
    return f"{PYTHON_DIR}/bin/{_python_name()}"


class BwrapSandbox:
    """SandboxStreamer on bubblewrap: the default backend on Linux."""

    name = "bwrap"

    def __init__(
        self,
        bwrap_path: str | None = None,
        *,
        identity: SandboxIdentity | None = None,
        seccomp: bool = True,
        cgroups: bool = True,
    ) -> None:
        found = bwrap_path or shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailableError(
                "bubblewrap is not installed: `apt-get install bubblewrap`, "
                "or choose the local backend explicitly (no isolation)"
            )
        self._bwrap = found
        self.identity = identity or resolve_identity()
        self._setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
        if self.identity.mode is IdentityMode.DROPPED and self._setpriv is None:
            raise SandboxUnavailableError(
                "setpriv (util-linux) is missing: the sandbox cannot drop to its user; "
                "`apt-get install -y util-linux`"
            )
        self.seccomp = seccomp
        if seccomp:
            filter_program()  # compile now: a missing libseccomp fails here, not per run
        self.quota_unavailable = unavailable_reason()
        if self.quota_unavailable is None:
            sweep_quotas()
        # cgroups=False (benchmarks): rlimits only, as on a host without writable cgroups.
        self._cgroups: CgroupSupport = (
            detect_cgroups() if cgroups else CgroupSupport(CgroupMode.NONE, detail="disabled")
        )
        sweep_stale(self._cgroups)
        sweep_views()
        self._view_fallbacks: dict[str, str] = {}  # what a run had to bind from its host path
        self._python_source = self._python_view()
        self._overlay, lock_fd, self._files = _prepare_overlay()
        weakref.finalize(self, _remove_overlay, self._overlay, lock_fd)
        self._base_args = self._static_args()

    @property
    def cgroups(self) -> CgroupSupport:
        """The cgroup support this backend uses on this host."""
        return self._cgroups

    def boundary(self) -> BoundaryDeclaration:
        return bwrap_boundary(
            self._bwrap,
            self._cgroups,
            self.identity,
            seccomp=self.seccomp,
            quota_unavailable=self.quota_unavailable,
            view_fallbacks=sorted(self._view_fallbacks.values()),
        )

    def workspace_path_inside(self, request: SandboxRequest) -> str:
        return WORKSPACE

    def state_path_inside(self, request: SandboxRequest) -> str | None:
        return STATE if request.state_dir is not None else None

    def runtime_path_inside(self, runtime_binds: Sequence[Path], host: Path) -> str:
        for index, bind in enumerate(runtime_binds):
            if host == bind or host.is_relative_to(bind):
                rel = host.relative_to(bind)
                inside = f"{RUNTIME_DIR}/{index}"
                return inside if rel == Path() else f"{inside}/{rel}"
        raise ValueError(f"{host} is under none of the runtime binds {list(runtime_binds)}")

    def python_inside(self) -> str:
        return python_in_sandbox()

    def toolbox_argv(self) -> list[str]:
        return [python_in_sandbox(), "-I", "-S", f"{_INSIDE_DIR}/toolbox.pyc"]

    def _python_view(self) -> Path:
        """The source bound at PYTHON_DIR: the interpreter's hard-link farm (its host path,
        /root/.pyenv/..., is not what mountinfo shows), else the host dir itself."""
        pydir = host_python_dir()
        site = pydir / "lib" / _python_name() / "site-packages"
        try:
            return link_farm(pydir, watch=site)  # a package installed later: a new farm
        except OSError as exc:
            self._fallback("the interpreter", "no hard-link view could be made", exc)
            return host_python_dir()

    def _static_args(self) -> list[str]:
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
        # /etc's files and the helper scripts are copied in per start (build_args): no mount
        # whose source names the staging dir. /etc/alternatives is shown as itself.
        args += ["--perms", "0755", "--dir", "/etc"]
        if Path("/etc/alternatives").is_dir():
            args += ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
        args += ["--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", "/run"]
        args += ["--perms", "0755", "--dir", _SOCKET_DIR, "--perms", "0755", "--dir", _INSIDE_DIR]
        args += ["--ro-bind", str(self._python_source), PYTHON_DIR]
        args += ["--dev", "/dev", "--proc", "/proc"]
        # Kernel knobs stay read-only whoever runs inside (root mode included).
        args += ["--ro-bind", "/proc/sys", "/proc/sys"]
        args += ["--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger"]
        return args

    def _drop_prefix(self) -> list[str]:
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

    def build_args(
        self,
        request: SandboxRequest,
        fds: list[int],
        links: Path | None = None,
        views: _Views | None = None,
    ) -> tuple[list[str], list[str]]:
        """The bwrap options (without the control fds) and the argv run inside, for a request.

        Opens the staged files copied in (appended to fds: the caller passes and closes
        them). Hands the worktree and state dir to the sandbox user. With links (a fresh
        per-run dir), forwarded sockets are bound from hard links there, and with views the
        state dir and runtime binds from neutral sources (views.py), so the bind sources that
        /proc/self/mountinfo shows inside carry no host path or id.
        """
        views = views or _Views()
        args = [self._bwrap, *self._base_args]
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
            args += [*_traversable_parents(bind, made), "--ro-bind", str(bind), str(bind)]
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
        grant_tree(request.workspace, self.identity, keep_top=True)
        args += ["--bind", str(request.workspace), WORKSPACE]
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
            inside = f"{_SOCKET_DIR}/{ep.name}.sock"
            args += ["--ro-bind", str(_neutral_link(ep.host_socket, ep.name, links)), inside]
            forwards += ["--forward", f"{ep.sandbox_port}={inside}"]
        args += ["--chdir", WORKSPACE, "--remount-ro", "/", "--clearenv"]
        path = f"{PYTHON_DIR}/bin:/usr/local/bin:/usr/bin:/bin"
        env = {"PATH": path, "HOME": HOME, "LANG": "C.UTF-8", **_library_path(), **request.env}
        for key, value in env.items():
            args += ["--setenv", key, value]
        argv = request.argv
        if forwards:  # the launcher is only needed (and only paid for) with endpoints
            launcher = [python_in_sandbox(), "-I", "-S", f"{_INSIDE_DIR}/launcher.pyc"]
            argv = [*launcher, *forwards, "--", *argv]
        return args, [*self._drop_prefix(), *argv]

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

    @asynccontextmanager
    async def stream(
        self, request: SandboxRequest, first_line: str
    ) -> AsyncIterator[SandboxProcess]:
        process = await start_uncancellable(self._start(request))
        try:
            with contextlib.suppress(
                SandboxIOError
            ):  # a program that died at once reports via exit
                await process.send_line(first_line)
            yield process
        finally:
            await process.close()

    async def _start(self, request: SandboxRequest) -> ManagedProcess:
        control = _BwrapControl(None)
        if request.endpoints:  # a dir per run for the sockets' neutral hard links
            control.links = self._overlay / "links" / secrets.token_hex(8)
            control.links.mkdir(mode=0o700)
        try:
            allowance = request.limits.disk_bytes
            if not request.workspace.is_dir():
                raise SandboxStartError(f"workspace {request.workspace} is not a directory")
            if allowance is not None and self.quota_unavailable is None:
                control.quota = await asyncio.to_thread(
                    WorkspaceQuota.mount, request.workspace, allowance
                )
            views = await asyncio.to_thread(self._views, request, control)
        except BaseException:
            control.cleanup()
            raise
        fds: list[int] = []
        try:
            args, argv = self.build_args(request, fds, control.links, views)
        except BaseException:
            for fd in fds:
                os.close(fd)
            control.cleanup()
            raise
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        fds += [info_w, block_r]
        try:
            args += ["--info-fd", str(info_w), "--block-fd", str(block_r)]
            if self.seccomp:
                fds.append(program_fd())
                args += ["--seccomp", str(fds[-1])]
            # Options go through a memfd (--args), so /proc/1/cmdline inside shows no host
            # path, id or data dir; only the program's own argv follows on the command line.
            fds.append(_args_fd(args[1:]))
            try:
                proc = await asyncio.create_subprocess_exec(
                    args[0],
                    "--args",
                    str(fds[-1]),
                    "--",
                    *argv,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    limit=STREAM_LIMIT,
                    pass_fds=fds,
                    # bwrap's own pid-1 keeps the env it was started with, and a program
                    # inside may read /proc/1/environ: start it with nothing worth reading.
                    env={"PATH": "/usr/bin:/bin"},
                    # Host-only marker of whose sandbox this is (/proc/<pid>/cwd of the bwrap
                    # outside); inside, pid-1 has its own root and cwd.
                    cwd=request.workspace,
                )
            finally:
                for fd in fds:
                    os.close(fd)
            process = ManagedProcess(proc, control, request.limits)
            try:
                # Made while bwrap sets up (it waits on block-fd before running anything).
                control.cgroup = self._make_cgroup(request)
                started = await self._release(control, request.limits, info_r, block_w)
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await process.close()
                raise
            if not started:
                ended = await process.close()
                detail = ended.stderr_tail.strip() or f"status {ended.returncode}"
                raise SandboxStartError(f"bwrap refused to start the sandbox: {detail}")
        except BaseException:
            control.cleanup()
            raise
        finally:
            os.close(info_r)
            with contextlib.suppress(OSError):
                os.close(block_w)
        log.debug("sandbox.started", conversation_id=request.conversation_id, pid=proc.pid)
        return process

    async def start_waiting(self, request: SandboxRequest) -> ManagedProcess:
        """Start a sandbox and send it nothing: a pool's slot, handed its run later."""
        return await start_uncancellable(self._start(request))

    def hand_over(
        self, process: ManagedProcess, workspace: Path, state_dir: Path, allowance: int
    ) -> None:
        """Give a slot started for an empty slot dir the run's worktree and state (blocking).

        The end state is the one ``_start`` makes for that run: the quota image, now holding
        the worktree, bound over it; the state dir's entries in the sandbox's moved state dir;
        both handed to the sandbox user; the wall clock counting from now.
        """
        control = process.control
        if not isinstance(control, _BwrapControl) or control.quota is None:
            raise SandboxStartError("only a quota-backed bwrap sandbox can be handed a run")
        if control.state is None:
            raise SandboxStartError("the pooled sandbox has no moved state dir")
        control.quota.adopt(workspace, allowance)
        grant_tree(workspace, self.identity, keep_top=True)
        control.state.adopt(state_dir)
        grant_tree(control.state.path, self.identity, keep_top=False)
        process.restart_clock()

    def _views(self, request: SandboxRequest, control: _BwrapControl) -> _Views:
        """Neutral sources for the state dir and runtime binds (views.py); where one cannot
        be made, the host path is bound and the boundary says so from then on."""
        views = _Views()
        for bind in request.runtime_binds:
            try:
                views.runtime[bind] = link_farm(bind)
            except OSError as exc:
                self._fallback("a runtime bind", "no hard-link view could be made", exc)
        state = request.state_dir
        if state is not None:
            state.mkdir(parents=True, exist_ok=True)
            if not same_filesystem(state):
                self._fallback("the state dir", "it is on another filesystem than the view dir")
            else:
                try:
                    control.state = MovedState.move(state)
                    views.state = control.state.path
                except OSError as exc:
                    self._fallback("the state dir", "it could not be moved to the view dir", exc)
        return views

    def _fallback(self, what: str, reason: str, error: OSError | None = None) -> None:
        # The boundary's text names no host path (it may reach a run's log); the log does.
        warning = f"mountinfo inside shows the host path of {what} ({reason})"
        if what not in self._view_fallbacks:
            log.warning("sandbox.view_fallback", warning=warning, error=str(error or ""))
        self._view_fallbacks[what] = warning

    def _make_cgroup(self, request: SandboxRequest) -> RunCgroup | None:
        if self._cgroups.mode is CgroupMode.NONE:
            return None
        try:
            return RunCgroup(self._cgroups, request.conversation_id, request.limits)
        except OSError as exc:
            raise SandboxStartError(f"cannot create the run's cgroups: {exc}") from exc

    async def _release(
        self, control: _BwrapControl, limits: SandboxLimits, info_r: int, block_w: int
    ) -> bool:
        """Read pid-1 from --info-fd, cap it, then let it run (it waits on --block-fd).

        False when bwrap exited before reporting a pid (it refused the command line).
        """
        info = await _read_fd(info_r, _START_TIMEOUT_S)
        if not info:
            return False
        pid = int(json.loads(info)["child-pid"])
        try:
            control.pidfd = os.pidfd_open(pid)
            if control.cgroup is not None:
                control.cgroup.attach(pid)
            _apply_rlimits(pid, limits, self._cgroups.missing if control.cgroup else None)
        except ProcessLookupError:
            return False  # bwrap's setup failed (a bind, say) before it waited on block-fd
        except OSError as exc:
            raise SandboxStartError(f"cannot cap the sandbox's resources: {exc}") from exc
        os.write(block_w, b"1")
        return True


@functools.cache
def _library_path() -> dict[str, str]:
    """LD_LIBRARY_PATH for a shared-libpython interpreter: its RUNPATH names the host dir
    (/root/.pyenv/.../lib), which is not where it is inside."""
    shared = any((host_python_dir() / "lib").glob("libpython3*.so*"))
    return {"LD_LIBRARY_PATH": f"{PYTHON_DIR}/lib"} if shared else {}


def _traversable_parents(path: Path, made: set[Path]) -> list[str]:
    """``--dir`` options making path's missing parents 0755 inside (bwrap makes them 0700,
    which the dropped sandbox user could not traverse); records them in made."""
    args: list[str] = []
    for parent in reversed(path.parents):
        if parent not in made:
            made.add(parent)
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _args_fd(args: list[str]) -> int:
    """A memfd holding NUL-separated bwrap options, for ``bwrap --args FD``."""
    fd = os.memfd_create("synthorg-bwrap-args", os.MFD_CLOEXEC)
    os.write(fd, b"".join(a.encode() + b"\0" for a in args))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _neutral_link(socket: Path, name: str, links: Path | None) -> Path:
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


def _apply_rlimits(pid: int, limits: SandboxLimits, missing: list[str] | None) -> None:
    """rlimits on pid-1 (inherited by everything inside, hard = soft: no raising them).

    Always: no core files (a crash must not drop a memory image into the worktree the gate
    commits) and a per-file size cap. Process and memory caps where cgroups do not cover.
    """
    resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
    f = limits.file_bytes
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (f, f))
    uncovered = ["pids", "memory"] if missing is None else missing
    if "pids" in uncovered:
        n = limits.max_processes
        resource.prlimit(pid, resource.RLIMIT_NPROC, (n, n))
    if "memory" in uncovered:
        m = limits.memory_bytes
        resource.prlimit(pid, resource.RLIMIT_AS, (m, m))
    if limits.cpu_seconds is not None:
        s = limits.cpu_seconds
        resource.prlimit(pid, resource.RLIMIT_CPU, (s, s + 1))


class _Views:
    """Per run: the neutral source of each runtime bind, and where the state dir moved."""

    def __init__(self) -> None:
        self.runtime: dict[Path, Path] = {}
        self.state: Path | None = None


class _BwrapControl:
    """Kill via pid-1's pidfd (the kernel then kills the namespace); cgroups as the net."""

    def __init__(self, cgroup: RunCgroup | None) -> None:
        self.cgroup = cgroup
        self.pidfd: int | None = None
        self.links: Path | None = None
        self.quota: WorkspaceQuota | None = None
        self.state: MovedState | None = None

    def kill(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill_all()

    def verdicts(self) -> Verdicts:
        cg = self.cgroup
        if cg is None:
            return Verdicts()
        return Verdicts(cg.oom_killed(), cg.pids_cap_hit(), cg.peak_processes())

    def cleanup(self) -> None:
        if self.links is not None:
            shutil.rmtree(self.links, ignore_errors=True)
            self.links = None
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        if self.cgroup is not None and not self.cgroup.remove_now():
            log.warning("sandbox.cgroup_leftover", dirs=[str(d) for d in self.cgroup.dirs.values()])
        self.cgroup = None
        if self.state is not None:
            state, self.state = self.state, None
            try:  # back before anyone (a resume, the host) looks for it
                state.restore()
            except OSError as exc:
                log.error("sandbox.state_restore_failed", dir=str(state.dir), error=str(exc))
        if self.quota is not None:
            quota, self.quota = self.quota, None
            try:  # blocking on purpose: the worktree must be whole before the gate runs
                quota.release()
            except SandboxStartError as exc:
                log.error("sandbox.quota_release_failed", dir=str(quota.dir), error=str(exc))


async def _read_fd(fd: int, limit_s: float) -> bytes:
    """Read a pipe to EOF without blocking the event loop."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    done: asyncio.Future[None] = loop.create_future()

    def on_readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError as exc:
            if not done.done():
                done.set_exception(exc)
            return
        if data:
            chunks.append(data)
        elif not done.done():
            done.set_result(None)

    loop.add_reader(fd, on_readable)
    try:
        await asyncio.wait_for(done, limit_s)
    except TimeoutError as exc:
        raise SandboxStartError(f"bwrap did not report its pid within {limit_s}s") from exc
    finally:
        loop.remove_reader(fd)
    return b"".join(chunks)
