"""The host-side work of one run: its budget, its confinement, and which run a child is for.

The agent owns the worktree, so whatever host git, mkfs or rsync do on it is work the agent
chooses (a 10 MiB random file costs ~4 CPU-s of `git add`; a frozen step holds the run). A run's
host children are spawned under its ``HostWork`` (found through a context variable, so the
spawners keep their signatures and every task of the run, threads from ``to_thread`` included,
carries it): each child joins the run's confinement (a cgroup with a CPU quota and a low weight,
or only its own process group where there is none), gets the CPU seconds the run has left as
RLIMIT_CPU (the kernel SIGKILLs it there), and a wall budget per step; what it used is charged
to the run. Over either budget the step is killed and ``HostWorkExceeded`` says so.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import resource
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from synthorg.errors import SynthOrgError

CODE = "host_work_over_budget"


class HostWorkExceeded(SynthOrgError):
    """A host-side step of a run went over the run's host-work budget and was killed."""

    code = CODE


class Confinement(Protocol):
    """Where a run's host children run: a cgroup, or nothing beyond their process group."""

    @property
    def describe(self) -> str:
        """One line for logs and doctor: what confines the run's host work."""
        ...

    def spawning(self) -> contextlib.AbstractContextManager[None]:
        """Around the spawn: a child spawned inside starts confined where the host can."""
        ...

    def adopt(self, pid: int) -> None:
        """Put the just-spawned child ``pid`` in (a child that already exited is no error)."""
        ...

    def close(self) -> None:
        """Kill whatever is still in and remove it (the run ended)."""
        ...


@dataclass(frozen=True, slots=True)
class HostBudget:
    """What one run's host work may use."""

    cpu_s: float
    """CPU seconds all of the run's host children may use together."""
    wall_s: float
    """Wall seconds one host-side step (one child) may take."""


@dataclass(slots=True)
class HostWork:
    """One run's host work: its budget, what it spent, and its confinement."""

    budget: HostBudget
    confinement: Confinement | None = None
    spent_cpu_s: float = 0.0
    stopped: str | None = None
    """Why a step was killed: from then on the run spawns no more host work."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def left_cpu_s(self) -> float:
        return self.budget.cpu_s - self.spent_cpu_s

    def before_spawn(self, what: str) -> None:
        """Refuse a step once the run's CPU budget is gone or a step was killed (nothing is
        spawned: a run whose host work was cut lands nothing)."""
        if self.stopped is not None:
            raise HostWorkExceeded(self.stopped)
        if self.left_cpu_s() <= 0:
            raise self.exceeded(what, "cpu")

    def spawning(self) -> contextlib.AbstractContextManager[None]:
        """Wrap the spawn in it: the child starts in the run's confinement."""
        if self.confinement is None:
            return contextlib.nullcontext()
        return self.confinement.spawning()

    def adopt(self, pid: int) -> int:
        """The child just spawned joins the run: its confinement, and the CPU left as its
        RLIMIT_CPU (soft = hard, so the kernel SIGKILLs it there, no SIGXCPU core dump in the
        worktree); whole seconds, at least one. Returns those seconds."""
        if self.confinement is not None:
            self.confinement.adopt(pid)
        seconds = max(1, math.ceil(self.left_cpu_s()))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            resource.prlimit(pid, resource.RLIMIT_CPU, (seconds, seconds))
        return seconds

    def charge(self, usage: resource.struct_rusage | None, *, killed: bool, limit_s: int) -> bool:
        """Add what a reaped child (and the children it waited for) used; whether it was
        the kernel's RLIMIT_CPU kill. rusage is sampled (it read 0.87 s for a child the
        kernel killed at its 1 s limit), so a SIGKILLed child that used most of its limit is
        taken as that kill, and the run's budget as spent."""
        used = (usage.ru_utime + usage.ru_stime) if usage is not None else 0.0
        at_limit = killed and used >= 0.75 * limit_s
        with self._lock:
            self.spent_cpu_s += used
            if at_limit:
                self.spent_cpu_s = max(self.spent_cpu_s, self.budget.cpu_s)
        return at_limit

    def exceeded(self, what: str, kind: str) -> HostWorkExceeded:
        """The error for a step killed over ``kind`` (``cpu`` or ``wall``); the run's first
        such reason is kept and given to every later step."""
        if self.stopped is None:
            self.stopped = self._message(what, kind)
        return HostWorkExceeded(self.stopped)

    def _message(self, what: str, kind: str) -> str:
        if kind == "wall":
            over = f"ran past the host-work wall budget of {self.budget.wall_s:g} s per step"
        else:
            over = (
                f"used the run's host-work CPU budget ({self.spent_cpu_s:.1f} of "
                f"{self.budget.cpu_s:g} CPU-s)"
            )
        return (
            f"host-side work for this run was stopped: {what} {over} and was killed; nothing "
            "of that step was kept. The worktree makes the host work too much (huge or very "
            "many files?): remove what need not land, or raise [limits] host_work_cpu_s / "
            "host_work_wall_s"
        )


_CURRENT: contextvars.ContextVar[HostWork | None] = contextvars.ContextVar(
    "synthorg_host_work", default=None
)


def current() -> HostWork | None:
    """The host work of the run this task (or thread) works for; None outside a run."""
    return _CURRENT.get()


@contextlib.contextmanager
def working_for(work: HostWork) -> Iterator[HostWork]:
    """Host children spawned inside (this task and what it starts) are ``work``'s."""
    token = _CURRENT.set(work)
    try:
        yield work
    finally:
        _CURRENT.reset(token)
