"""A run's host-side step held on purpose (``SYNTHORG_PAUSE_AT=host-work`` stops its child):
the wall budget kills it and fails the run; a SIGKILLed run takes its host children with it.

The held child is stopped, so it can neither finish nor die by itself: only the run's budget,
its end, or the reaper of its SIGKILLed process ends it.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from synthorg.sandbox.hostcgroup import host_parent
from synthorg.store import open_store
from tests.faults.harness import DEMO_TASK, Proc, World, synthorg

pytestmark = [pytest.mark.faults, pytest.mark.bwrap, pytest.mark.timeout(600)]

_HELD = re.compile(r"SYNTHORG_PAUSED_AT host-work child (\d+)")


def _world(tmp_path: Path, wall_s: float) -> World:
    # The [limits] table follows the [store] one in the world's config.
    limits = f"\n[limits]\nhost_work_wall_s = {wall_s}\n"
    return World(tmp_path, str(tmp_path / "store" / "store.db"), limits)


async def _held_child(run_output: list[str], proc: asyncio.subprocess.Process) -> int:
    """The pid of the run's held host child, once announced."""
    deadline = time.monotonic() + 300
    while True:
        for line in run_output:
            found = _HELD.search(line)
            if found:
                return int(found.group(1))
        assert proc.returncode is None, "the run ended before a host step was held"
        assert time.monotonic() < deadline, "no host step was held:\n" + "".join(run_output)
        await asyncio.sleep(0.05)  # polling the collected output: the reader appends to it


def _branch(repo: Path, conversation: str) -> str:
    return subprocess.run(
        ["git", "for-each-ref", "--format=%(objectname)", f"refs/heads/synthorg/{conversation}"],
        cwd=repo,
        capture_output=True,
        text=True,
    ).stdout.strip()


async def test_a_held_host_step_is_killed_at_its_wall_budget_and_fails_the_run(
    tmp_path: Path,
) -> None:
    world = _world(tmp_path, wall_s=3)
    repo = world.repo("calc")
    base = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    run = await start_fix_held(world, repo)
    conversation = await run.conversation_id()
    child = await _held_child(run.lines, run.proc)
    code = await run.exit(timeout=240)  # without a wall budget it never ends
    assert code != 0, run.output
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    store = await open_store(world.store_url)
    try:
        final = await store.get_conversation(conversation)
        history = await store.history(conversation, limit=1000)
    finally:
        await store.close()
    assert final.status.value == "failed", final
    assert "host-work wall budget of 3 s" in (final.error or ""), final.error
    codes = [getattr(e.event, "code", None) for e in history]
    assert "host_work_over_budget" in codes, codes
    assert _branch(repo, conversation) in ("", base), "something landed"


async def test_a_sigkilled_run_takes_its_held_host_step_with_it(tmp_path: Path) -> None:
    world = _world(tmp_path, wall_s=600)
    repo = world.repo("calc")
    run = await start_fix_held(world, repo)
    await run.conversation_id()
    child = await _held_child(run.lines, run.proc)
    host = psutil.Process(run.proc.pid)
    descendants = host.children(recursive=True)
    assert child in {p.pid for p in descendants}
    cgroup = _host_cgroup(child)
    assert (cgroup is None) == (host_parent() is None), "not in the run's host-work cgroup"
    os.kill(run.proc.pid, signal.SIGKILL)
    await run.exit()
    _, alive = await asyncio.to_thread(psutil.wait_procs, descendants, 60)
    assert alive == [], f"outlived their SIGKILLed run: {alive}"
    if cgroup is not None:  # a host with a cpu cgroup: the run's is gone too
        deadline = time.monotonic() + 60
        while cgroup.exists():
            assert time.monotonic() < deadline, f"{cgroup} outlived its run"
            await asyncio.sleep(0.05)  # rmdir by the reaper: nothing to wait on


def _host_cgroup(pid: int) -> Path | None:
    """The host-work cgroup dir ``pid`` is in (v1 cpu or v2), if any."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "synthorg-hostwork" not in path:
            continue
        if "cpu" in controllers.split(","):
            return Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
        if controllers == "":
            return Path("/sys/fs/cgroup/unified") / path.lstrip("/")
    return None


async def start_fix_held(world: World, repo: Path) -> Proc:
    """`synthorg run` of the demo fix whose first host-side step of the run is held."""
    return await synthorg(
        world,
        "run",
        DEMO_TASK,
        "--repo",
        str(repo),
        "--loop",
        "react",
        env={"SYNTHORG_PAUSE_AT": "host-work"},
    )
