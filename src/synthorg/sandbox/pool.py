"""A pool of pre-started bwrap sandboxes, each waiting for one run: its program starts early.

Why: the OpenHands entrypoint spends ~5 s importing the SDK before its first model request.
A slot is a sandbox started exactly as ``BwrapSandbox`` starts a run's (same options, limits,
uid drop, seccomp, cgroups, quota image), but for an empty per-slot worktree dir and state
dir, so its program (the entrypoint, which imports the SDK before it reads its spec) runs
ahead. A run takes a slot whose launch is the same as its own but for the worktree, state dir
and id; ``BwrapSandbox.hand_over`` copies the worktree into the slot's (still empty) quota
image, binds that image over the worktree on the host, moves the state dir's entries into the
slot's state dir and starts the wall clock; then the run spec is sent. A slot serves one run:
it is torn down after, never put back, and a new one is started in its place.

Isolation is the non-pooled sandbox's: the mounts inside are made by bwrap at start from the
same options (the worktree's mount is the quota image's root either way, whose contents the
host fills before the spec is sent); nothing but the entrypoint runs inside until then, and it
reads nothing of the workspace. A slot never sees another run's worktree: its image is new
and holds only what its own run copied in.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from synthorg.logging import get_logger
from synthorg.processes import pid_alive
from synthorg.sandbox.bwrap import NEUTRAL_DOTGIT, BwrapSandbox
from synthorg.sandbox.errors import SandboxIOError
from synthorg.sandbox.identity import IdentityMode
from synthorg.sandbox.process import ManagedProcess
from synthorg.sandbox.protocol import SandboxProcess, SandboxRequest
from synthorg.sandbox.quota import PoolTooSmall, held
from synthorg.sandbox.views import same_filesystem, view_root

log = get_logger(__name__)

_RUN_FIELDS = frozenset({"workspace", "state_dir", "conversation_id"})


def launch_key(request: SandboxRequest) -> str:
    """What two requests must share for one's slot to serve the other: all but the run's own
    worktree, state dir and id."""
    return request.model_dump_json(exclude=set(_RUN_FIELDS))


@dataclass
class _Slot:
    dir: Path
    process: ManagedProcess


class SandboxPool:
    """A SandboxRunner over BwrapSandbox: runs take pre-started slots (``size`` per launch)."""

    def __init__(
        self, sandbox: BwrapSandbox, size: int, *, refill: bool = True, root: Path | None = None
    ) -> None:
        self._sandbox = sandbox
        self.size = size
        self._refill = refill  # False: what was warmed serves, nothing replaces it (one run)
        self._root = (root or view_root()) / "pool"
        self._root.mkdir(mode=0o700, parents=True, exist_ok=True)
        _sweep(self._root)
        self._idle: dict[str, list[_Slot]] = {}
        self._starting: dict[str, set[asyncio.Task[None]]] = {}  # per launch key
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.served = 0
        """Runs that took a slot (tests and benchmarks read it)."""

    def launch_refusal(self, request: SandboxRequest) -> str | None:
        """Why no slot can be started for request's launch (None when one can)."""
        if self._sandbox.quota_unavailable is not None or request.limits.disk_bytes is None:
            return "no worktree quota (the slot's worktree mount is its quota image)"
        if self._sandbox.identity.mode is not IdentityMode.DROPPED:
            return "the sandbox does not run as the sandbox user (ext4's reserve is root's)"
        return None

    def refusal(self, request: SandboxRequest) -> str | None:
        """Why a slot cannot serve request (None when one can)."""
        if (refusal := self.launch_refusal(request)) is not None:
            return refusal
        if request.state_dir is None or not same_filesystem(request.state_dir):
            return "the state dir cannot be moved into the view dir"
        try:
            if not stat.S_ISREG((request.workspace / ".git").lstat().st_mode):
                return "the workspace is not a git worktree (no .git file)"
        except OSError:
            return "the workspace is not a git worktree (no .git file)"
        if held(request.workspace):
            return "another sandbox of this process has a quota on the worktree"
        return None

    def warm(self, request: SandboxRequest) -> None:
        """Start slots in the background until ``size`` exist for request's launch."""
        if self._closed or self.size <= 0 or self.launch_refusal(request) is not None:
            return
        key = launch_key(request)
        starting = self._starting.setdefault(key, set())
        for _ in range(self.size - len(self._idle.get(key, ())) - len(starting)):
            task = asyncio.get_running_loop().create_task(self._start_slot(key, request))
            for tasks in (self._tasks, starting):
                tasks.add(task)
                task.add_done_callback(tasks.discard)

    async def _start_slot(self, key: str, request: SandboxRequest) -> None:
        token = secrets.token_hex(8)
        slot_dir = self._root / f"{os.getpid()}-{token}"
        try:
            (slot_dir / "ws").mkdir(parents=True, mode=0o700)
            (slot_dir / "state").mkdir(mode=0o700)
            # A .git file like a worktree's, so the slot gets the same neutral .git cover.
            (slot_dir / "ws" / ".git").write_text(NEUTRAL_DOTGIT)
            # The image is made for a worktree as large as the allowance (sparse: unused room
            # costs no disk; tune2fs reserves at most half an image); hand_over reserves the
            # room a given run's image would not have had. A larger worktree starts cold.
            allowance = 2 * (request.limits.disk_bytes or 0)
            slot_request = request.model_copy(
                update={
                    "workspace": slot_dir / "ws",
                    "state_dir": slot_dir / "state",
                    "conversation_id": f"pool-{token}",
                    "limits": request.limits.model_copy(update={"disk_bytes": allowance}),
                }
            )
            process = await self._sandbox.start_waiting(slot_request)
        except Exception as exc:  # the run that comes starts its own sandbox
            log.warning("sandbox.pool_start_failed", error=str(exc))
            shutil.rmtree(slot_dir, ignore_errors=True)
            return
        if self._closed:
            await _discard(_Slot(slot_dir, process))
            return
        self._idle.setdefault(key, []).append(_Slot(slot_dir, process))

    def _take(self, request: SandboxRequest) -> _Slot | None:
        slots = self._idle.get(launch_key(request), [])
        while slots:
            slot = slots.pop(0)
            if slot.process.exit is None:
                return slot
            self._spawn_discard(slot)  # died waiting (wall-clock limit, OOM): never used
        return None

    @asynccontextmanager
    async def stream(
        self, request: SandboxRequest, first_line: str
    ) -> AsyncIterator[SandboxProcess]:
        refusal = self.refusal(request)
        slot = None
        if refusal is None:
            slot = self._take(request)
            starting = self._starting.get(launch_key(request))
            if slot is None and starting:  # a slot already starting is ahead of a cold start
                await asyncio.wait(set(starting), return_when=asyncio.FIRST_COMPLETED)
                slot = self._take(request)
            if self._refill:
                self.warm(request)  # the replacement starts now: a used slot never comes back
        if slot is None:
            log.debug("sandbox.pool_miss", reason=refusal or "no slot ready")
            async with self._sandbox.stream(request, first_line) as process:
                yield process
            return
        allowance = request.limits.disk_bytes
        assert allowance is not None and request.state_dir is not None  # refusal checked
        try:
            await asyncio.to_thread(
                self._sandbox.hand_over,
                slot.process,
                request.workspace,
                request.state_dir,
                allowance,
            )
        except PoolTooSmall as exc:  # nothing was handed over: the run starts its own
            log.info("sandbox.pool_miss", reason=str(exc))
            await _discard(slot)
            async with self._sandbox.stream(request, first_line) as process:
                yield process
            return
        except BaseException:
            await _discard(slot)
            raise
        self.served += 1
        log.debug("sandbox.pool_hit", conversation_id=request.conversation_id)
        try:
            with contextlib.suppress(SandboxIOError):  # a program that died reports via exit
                await slot.process.send_line(first_line)
            yield slot.process
        finally:
            await _discard(slot)

    def _spawn_discard(self, slot: _Slot) -> None:
        task = asyncio.get_running_loop().create_task(_discard(slot))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settle(self) -> None:
        """Wait until every slot being started is started (or failed to)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """Tear every waiting slot down (and wait for the ones still starting)."""
        self._closed = True
        await self.settle()
        slots = [slot for slots in self._idle.values() for slot in slots]
        self._idle.clear()
        await asyncio.gather(*(_discard(slot) for slot in slots))


async def _discard(slot: _Slot) -> None:
    """Kill the slot's sandbox (its cleanup puts a handed-over worktree and state back)."""
    try:
        await slot.process.close()
    finally:
        await asyncio.to_thread(shutil.rmtree, slot.dir, True)


def _sweep(root: Path) -> None:
    """Delete slot dirs of dead processes (the quota and view sweeps put their mounts and
    state back first: the backend sweeps when it is made)."""
    with contextlib.suppress(OSError):
        for entry in root.iterdir():
            pid = entry.name.partition("-")[0]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)
