"""A run's host-work bound for the run's lifetime: its budget from ``[limits]``, its cgroup."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from synthorg.hostwork import HostBudget, HostWork, working_for
from synthorg.logging import get_logger
from synthorg.sandbox.hostcgroup import confine
from synthorg.service.config import HostWorkSettings

_log = get_logger("synthorg.service")


@contextlib.contextmanager
def bound_host_work(settings: HostWorkSettings, conversation_id: str) -> Iterator[HostWork]:
    """Every host child the run spawns inside is confined to the run's cgroup (or only its
    process group here), budgeted and charged; at the end whatever is left in it is killed."""
    confinement = confine(conversation_id, settings.host_work_cpu_quota)
    work = HostWork(
        HostBudget(cpu_s=settings.host_work_cpu_s, wall_s=settings.host_work_wall_s),
        confinement,
    )
    try:
        with working_for(work):
            yield work
    finally:
        if confinement is not None:
            confinement.close()
        _log.info(
            "HOST_WORK",
            conversation_id=conversation_id,
            cpu_s=round(work.spent_cpu_s, 3),
            confined=confinement.describe if confinement is not None else "process group",
        )
