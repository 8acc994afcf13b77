"""A worker's own health signal: a file renewed while its store answers and its pollers run.

`synthorg worker` serves no HTTP, so an orchestrator's probe reads this file instead
(`synthorg worker --health`): fresh means the worker's event loop runs, it reaches the shared
store (what its run leases are renewed in) and its Temporal pollers are alive. A frozen,
cut-off or wedged worker stops renewing it and turns unhealthy within ``stale_s``. Standard
library only: the probe runs every few seconds and must not import Temporal.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from synthorg.logging import get_logger

_log = get_logger("synthorg.distributed")


def write_pulse(path: Path, *, worker: str, stale_s: float) -> None:
    """Record that the worker is healthy now (atomically: a probe never reads half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    body = {"worker": worker, "pid": os.getpid(), "at": time.time(), "stale_s": stale_s}
    tmp.write_text(json.dumps(body), encoding="utf-8")
    tmp.replace(path)


async def keep_pulse(
    path: Path,
    *,
    worker: str,
    interval_s: float,
    healthy: Callable[[], Awaitable[bool]],
) -> None:
    """Renew the file every ``interval_s`` while ``healthy()`` says so within that time."""
    stale_s = 3 * interval_s
    while True:
        try:
            async with asyncio.timeout(interval_s):
                ok = await healthy()
        except Exception as exc:  # a probe: any failure means not healthy now
            ok = False
            _log.warning("WORKER_UNHEALTHY", worker=worker, error=str(exc) or type(exc).__name__)
        if ok:
            await asyncio.to_thread(write_pulse, path, worker=worker, stale_s=stale_s)
        await asyncio.sleep(interval_s)


def pulse_problem(path: Path, *, now: float | None = None) -> str | None:
    """None when the worker that writes ``path`` is healthy; else what is wrong."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        at, stale_s = float(body["at"]), float(body["stale_s"])
    except FileNotFoundError:
        return f"no health file {path}: the worker has not become healthy yet"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable health file {path}: {exc}"
    age = (time.time() if now is None else now) - at
    if age > stale_s:
        return (
            f"worker {body.get('worker')} last healthy {age:.0f} s ago (more than {stale_s:g} s):"
            " it is frozen, cannot reach its store, or its pollers stopped"
        )
    return None
