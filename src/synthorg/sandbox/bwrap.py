"""The bubblewrap backend: namespaces, pinned egress, cgroup/rlimit caps, pid-1 teardown.

This module starts and hands over sandboxes; what they see where is bwrap_layout.py, their
command line bwrap_args.py, and the host's handles on a started one bwrap_control.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from synthorg.logging import get_logger
from synthorg.paths import synthorg_home
from synthorg.sandbox.boundary import bwrap_boundary
from synthorg.sandbox.bwrap_args import BwrapArgs, Views, args_fd
from synthorg.sandbox.bwrap_control import BwrapControl, apply_rlimits, read_fd
from synthorg.sandbox.bwrap_layout import (
    INSIDE_DIR,
    NEUTRAL_DOTGIT,
    RUNTIME_DIR,
    STATE,
    WORKSPACE,
    host_python,
    host_python_dir,
    prepare_overlay,
    python_in_sandbox,
    python_name,
    remove_overlay,
)
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
    grant_top,
    grant_tree,
    reclaim_tree,
    resolve_identity,
)
from synthorg.sandbox.idmap import IdmapUnsupported
from synthorg.sandbox.process import STREAM_LIMIT, ManagedProcess, start_uncancellable
from synthorg.sandbox.protocol import (
    BoundaryDeclaration,
    SandboxLimits,
    SandboxProcess,
    SandboxRequest,
)
from synthorg.sandbox.quota import WorkspaceQuota, owner_root, unavailable_reason
from synthorg.sandbox.quota_sweep import settle as settle_quota
from synthorg.sandbox.quota_sweep import stale_over
from synthorg.sandbox.quota_sweep import sweep_stale as sweep_quotas
from synthorg.sandbox.seccomp import filter_program, program_fd
from synthorg.sandbox.views import MovedState, link_farm, same_filesystem
from synthorg.sandbox.views import sweep_stale as sweep_views

__all__ = [
    "NEUTRAL_DOTGIT",
    "BwrapSandbox",
    "host_python",
    "host_python_dir",
    "python_in_sandbox",
]

log = get_logger(__name__)

_START_TIMEOUT_S = 10.0


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
        owner: Path | None = None,
    ) -> None:
        """``owner``: the data dir whose quotas this backend makes and sweeps (default
        ``SYNTHORG_HOME``); a dead process's quota is settled only by its own data dir."""
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
        self.quotas: Path | None = None
        if self.quota_unavailable is None:
            self.quotas = owner_root(owner or synthorg_home())
            sweep_quotas(self.quotas)
        # cgroups=False (benchmarks): rlimits only, as on a host without writable cgroups.
        self._cgroups: CgroupSupport = (
            detect_cgroups() if cgroups else CgroupSupport(CgroupMode.NONE, detail="disabled")
        )
        sweep_stale(self._cgroups)
        sweep_views()
        self._view_fallbacks: dict[str, str] = {}  # what a run had to bind from its host path
        self._python_source = self._python_view()
        self._overlay, lock_fd, files = prepare_overlay()
        weakref.finalize(self, remove_overlay, self._overlay, lock_fd)
        self._args = BwrapArgs(
            found, self._setpriv, self.identity, self._python_source, self._overlay, files
        )

    def settle_dead(self, worktree: Path) -> int:
        """Release the quotas of owners that died (each image copied back onto its worktree,
        unmounted, deleted): this data dir's, and any data dir's over ``worktree`` (a dead
        owner of another data dir on this host); how many. A takeover calls it before its run
        judges a worktree a dead owner's sandbox was writing."""
        if self.quota_unavailable is None:
            return sweep_quotas(self.quotas) + sum(map(settle_quota, stale_over(worktree)))
        return 0

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
        return [python_in_sandbox(), "-I", "-S", f"{INSIDE_DIR}/toolbox.pyc"]

    def _python_view(self) -> Path:
        """The source bound at PYTHON_DIR: the interpreter's hard-link farm (its host path,
        /root/.pyenv/..., is not what mountinfo shows), else the host dir itself."""
        pydir = host_python_dir()
        site = pydir / "lib" / python_name() / "site-packages"
        try:
            return link_farm(pydir, watch=site)  # a package installed later: a new farm
        except OSError as exc:
            self._fallback("the interpreter", "no hard-link view could be made", exc)
            return host_python_dir()

    @asynccontextmanager
    async def stream(
        self, request: SandboxRequest, first_line: str
    ) -> AsyncIterator[SandboxProcess]:
        process = await start_uncancellable(self._start(request, layered=True))
        try:
            with contextlib.suppress(
                SandboxIOError
            ):  # a program that died at once reports via exit
                await process.send_line(first_line)
            yield process
        finally:
            await process.close()

    async def _start(self, request: SandboxRequest, *, layered: bool) -> ManagedProcess:
        control = BwrapControl(None)
        if request.endpoints:  # a dir per run for the sockets' neutral hard links
            control.links = self._overlay / "links" / secrets.token_hex(8)
            control.links.mkdir(mode=0o700)
        try:
            allowance = request.limits.disk_bytes
            if not request.workspace.is_dir():
                raise SandboxStartError(f"workspace {request.workspace} is not a directory")
            if allowance is not None and self.quota_unavailable is None:
                control.quota = await asyncio.to_thread(
                    self._mount_quota, request.workspace, allowance, layered
                )
            else:
                await asyncio.to_thread(grant_tree, request.workspace, self.identity, keep_top=True)
            views = await asyncio.to_thread(self._views, request, control)
        except BaseException:
            control.cleanup()
            raise
        fds: list[int] = []
        try:
            args, argv = self._args.build(request, fds, control.links, views)
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
            fds.append(args_fd(args[1:]))
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

    def _mount_quota(self, workspace: Path, allowance: int, layered: bool) -> WorkspaceQuota:
        """The run's quota over workspace, the tree handed to the sandbox user (blocking).

        Layered, as root: the overlay reads an idmapped clone of the worktree (idmap.py), so
        no file is chowned and nothing is walked (a tree an earlier walk handed over is taken
        back first: ``reclaim_tree``). Otherwise, or where the kernel cannot idmap, the tree
        is chowned before the quota is mounted (chowned through an overlay, every file would
        be copied up). A quota this process already holds on workspace is shared as it is.
        """
        identity = self.identity

        def take_back() -> None:
            grant_top(workspace, identity)
            reclaim_tree(workspace, identity)

        if layered and identity.mode is IdentityMode.DROPPED:
            try:
                return WorkspaceQuota.mount(
                    workspace, allowance, self.quotas, layered=True,
                    idmap=(identity.uid, identity.gid), prepare=take_back,
                )  # fmt: skip
            except IdmapUnsupported as exc:  # the same outcome as before idmaps, one walk slower
                log.warning("sandbox.idmap_unavailable", error=str(exc), fallback="chown walk")
        return WorkspaceQuota.mount(
            workspace, allowance, self.quotas, layered=layered,
            prepare=lambda: grant_tree(workspace, identity, keep_top=True),
        )  # fmt: skip

    async def start_waiting(self, request: SandboxRequest) -> ManagedProcess:
        """Start a sandbox and send it nothing: a pool's slot, handed its run later."""
        # A full copy, not an overlay: the slot's tree is replaced by the run's (adopt).
        return await start_uncancellable(self._start(request, layered=False))

    def hand_over(
        self, process: ManagedProcess, workspace: Path, state_dir: Path, allowance: int
    ) -> None:
        """Give a slot started for an empty slot dir the run's worktree and state (blocking).

        The end state is the one ``_start`` makes for that run: the quota image, now holding
        the worktree, bound over it; the state dir's entries in the sandbox's moved state dir;
        both handed to the sandbox user; the wall clock counting from now.
        """
        control = process.control
        if not isinstance(control, BwrapControl) or control.quota is None:
            raise SandboxStartError("only a quota-backed bwrap sandbox can be handed a run")
        if control.state is None:
            raise SandboxStartError("the pooled sandbox has no moved state dir")
        control.quota.adopt(workspace, allowance)
        grant_tree(workspace, self.identity, keep_top=True)
        control.state.adopt(state_dir)
        grant_tree(control.state.path, self.identity, keep_top=False)
        process.restart_clock()

    def _views(self, request: SandboxRequest, control: BwrapControl) -> Views:
        """Neutral sources for the state dir and runtime binds (views.py); where one cannot
        be made, the host path is bound and the boundary says so from then on."""
        views = Views()
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
        self, control: BwrapControl, limits: SandboxLimits, info_r: int, block_w: int
    ) -> bool:
        """Read pid-1 from --info-fd, cap it, then let it run (it waits on --block-fd).

        False when bwrap exited before reporting a pid (it refused the command line).
        """
        info = await read_fd(info_r, _START_TIMEOUT_S)
        if not info:
            return False
        pid = int(json.loads(info)["child-pid"])
        try:
            control.pidfd = os.pidfd_open(pid)
            if control.cgroup is not None:
                control.cgroup.attach(pid)
            apply_rlimits(pid, limits, self._cgroups.missing if control.cgroup else None)
        except ProcessLookupError:
            return False  # bwrap's setup failed (a bind, say) before it waited on block-fd
        except OSError as exc:
            raise SandboxStartError(f"cannot cap the sandbox's resources: {exc}") from exc
        os.write(block_w, b"1")
        return True
