"""Workspaces travel: workers with their own data dirs reach the project only through a remote.

The project is served by ``git daemon`` on loopback and its local source is deleted; every
process (two workers, the terminal that starts the run) has its own ``SYNTHORG_HOME``. A run
killed mid tool call on one worker is resumed on the other from the remote's checkpoint.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from synthorg.distributed.client import start_run
from synthorg.domain import (
    ActionEvent,
    CheckpointEvent,
    MessageEvent,
    ObservationEvent,
    Task,
    new_id,
)
from synthorg.service.demo import DEMO_TASK
from synthorg.service.options import RunOptions
from synthorg.store import open_store
from tests.distributed import netns
from tests.distributed.conftest import TemporalServer
from tests.distributed.scripts import READ_FOREVER, SETTLE_COMMAND, SLOW_COMMAND
from tests.distributed.support import client_of, events_of, kill_holder, slow_action, start_worker
from tests.distributed.travel import TravelWorld, serve_projects
from tests.faults.harness import Proc, branch_tests_pass, check_log, synthorg
from tests.gitremote import GitDaemon

pytestmark = [pytest.mark.postgres, pytest.mark.bwrap, pytest.mark.faults]


@pytest.fixture
def world(
    tmp_path: Path, pg_schema: str, temporal_server: TemporalServer, daemon: GitDaemon
) -> TravelWorld:
    remotes = serve_projects(daemon, tmp_path, ["app"])
    return TravelWorld(tmp_path, pg_schema, address=temporal_server.address, remotes=remotes)


async def _story(world: TravelWorld, conversation: str) -> list[str]:
    """The conversation's status changes and errors, for a failure message."""
    store = await open_store(world.store_url)
    try:
        history = await store.history(conversation, limit=10_000)
    finally:
        await store.close()
    return [
        f"{s.seq} {type(s.event).__name__} {s.event.model_dump_json()[:300]}"
        for s in history
        if type(s.event).__name__ in ("StatusChangeEvent", "ErrorEvent", "CancelEvent")
    ]


def _served_file(bare: Path, rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(bare), "show", f"{rev}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.timeout(900)
async def test_a_killed_run_resumes_on_another_machine_from_the_remote_checkpoint(
    world: TravelWorld, daemon: GitDaemon
) -> None:
    await _killed_run_moves(world, daemon, [(), ()])


@pytest.mark.timeout(900)
async def test_the_same_with_workers_as_hosts_in_network_namespaces(
    world: TravelWorld, daemon: GitDaemon
) -> None:
    """Each worker in its own namespace: the store, Temporal and the remote only over its
    veth, the machine's other ports unreachable."""
    why = netns.available()
    if why is not None:
        pytest.skip(f"network namespaces: {why}")
    ports = [urlsplit(world.store_url).port or 5432, int(world.address.rsplit(":", 1)[1])]
    with socket.socket() as unrelayed, netns.hosts(2, [*ports, daemon.port]) as hosts:
        unrelayed.bind(("127.0.0.1", 0))
        unrelayed.listen()
        port = unrelayed.getsockname()[1]
        assert not any(h.reaches("127.0.0.1", port) for h in hosts)
        assert all(h.reaches("127.0.0.1", daemon.port) for h in hosts)
        await _killed_run_moves(world, daemon, [h.prefix for h in hosts])


async def _killed_run_moves(
    world: TravelWorld, daemon: GitDaemon, prefixes: list[tuple[str, ...]]
) -> None:
    """Two workers (``prefixes`` wrap them), a run killed mid tool call on the one holding it:
    the other resumes it from the remote's checkpoint and lands it on the remote."""
    machines, terminal, workers, run, conversation, slow = await _travelling_run(
        world, "travel", SLOW_COMMAND, prefixes
    )
    store = await open_store(world.store_url)
    try:
        async with asyncio.timeout(120):  # logged once it is on the remote
            async for stored in store.tail(conversation):
                if isinstance(stored.event, CheckpointEvent) and stored.event.action_id == slow:
                    break
    finally:
        await store.close()
    # The checkpoint before the slow command (with the first change) is on the remote.
    checkpoints = daemon.refs("app", f"refs/synthorg/checkpoints/{conversation}/")
    assert checkpoints, daemon.refs("app")
    held = await kill_holder(world, workers, conversation)

    assert await run.exit(timeout=600) == 0, run.output + "".join(w.output for w in workers)
    await check_log(terminal, conversation)  # seqs contiguous, each action observed once
    events = await events_of(world, conversation)
    store = await open_store(world.store_url)
    try:
        record = await store.get_conversation(conversation)
    finally:
        await store.close()
    (answer,) = [e for e in events if isinstance(e, ObservationEvent) and e.action_id == slow]
    assert answer.non_retryable and "effect is unknown" in answer.content, answer
    # The agent is told its worktree came from the remote's checkpoint on another machine.
    (moved,) = [e for e in events if isinstance(e, MessageEvent) and "restored" in e.text]
    assert moved.role == "system" and f"checkpoint {len(checkpoints) - 1}" in moved.text, moved

    # Landed on the remote: the branch is the landed commit, with the change made before the
    # kill (restored from the checkpoint on the other machine) and the fix.
    bare = daemon.bare("app")
    assert daemon.refs("app")[f"refs/heads/synthorg/{conversation}"] == record.commit_sha
    assert _served_file(bare, f"synthorg/{conversation}", "travelled.txt") == "travelled\n"
    branch_tests_pass(bare, conversation)
    survivor = machines[1 - held]
    assert (survivor.home / "worktrees" / conversation / "app" / "travelled.txt").is_file()
    assert workers[1 - held].proc.returncode is None
    # Nobody had the project on disk but through its own mirror; the terminal had none.
    assert not (terminal.home / "worktrees").exists()


@pytest.mark.timeout(900)
async def test_an_action_logged_as_done_keeps_its_effect_when_its_worker_dies_next(
    world: TravelWorld, daemon: GitDaemon
) -> None:
    """A change, its observation logged, then a read (no checkpoint before it) in which the
    worker is killed: the successor's worktree has the change the log says was made."""
    _, terminal, workers, run, conversation, reading = await _travelling_run(
        world, "settle", READ_FOREVER, [(), ()]
    )
    before = await events_of(world, conversation)
    (wrote,) = [e for e in before if isinstance(e, ActionEvent) and SETTLE_COMMAND in str(e)]
    done = [e for e in before if isinstance(e, ObservationEvent) and e.action_id == wrote.action_id]
    assert done and not done[0].is_error, done  # logged as done before the kill
    await kill_holder(world, workers, conversation)

    assert await run.exit(timeout=600) == 0, run.output + "".join(w.output for w in workers)
    await check_log(terminal, conversation)
    events = await events_of(world, conversation)
    (answer,) = [e for e in events if isinstance(e, ObservationEvent) and e.action_id == reading]
    assert "effect is unknown" in answer.content, answer
    # The change the log reports as made is in what landed (restored on the other machine).
    assert _served_file(daemon.bare("app"), f"synthorg/{conversation}", "settled.txt") == (
        "settled\n"
    )
    branch_tests_pass(daemon.bare("app"), conversation)


async def _travelling_run(
    world: TravelWorld, model: str, command: str, prefixes: list[tuple[str, ...]]
) -> tuple[list[TravelWorld], TravelWorld, list[Proc], Proc, str, str]:
    """Two workers (``prefixes`` wrap them) and a run on ``model`` started from a terminal,
    once a worker is inside the tool call ``command``: (machines, terminal, workers, the run's
    process, conversation id, that call's action id)."""
    machines = [world.machine("a"), world.machine("b")]
    terminal = world.machine("terminal")
    workers = list(
        await asyncio.gather(*(start_worker(m, p) for m, p in zip(machines, prefixes, strict=True)))
    )
    run = await synthorg(
        terminal, "run", DEMO_TASK, "--repo", "project:app", "--loop", "react",
        "--model", model, "--engine", "temporal",
    )  # fmt: skip
    conversation = await run.conversation_id()
    action = await slow_action(terminal, conversation, command)
    return machines, terminal, workers, run, conversation, action


@pytest.fixture
def two_projects(
    tmp_path: Path, pg_schema: str, temporal_server: TemporalServer, daemon: GitDaemon
) -> TravelWorld:
    remotes = serve_projects(daemon, tmp_path, ["app", "lib"])
    return TravelWorld(tmp_path, pg_schema, address=temporal_server.address, remotes=remotes)


@pytest.mark.timeout(1500)
async def test_three_machines_land_twelve_runs_of_two_remote_projects(
    two_projects: TravelWorld, daemon: GitDaemon
) -> None:
    world = two_projects
    machines = [world.machine(name) for name in "abc"]
    await asyncio.gather(*(start_worker(m) for m in machines))
    client = await client_of(world)
    handles = {}
    for n in range(12):
        project = ("app", "lib")[n % 2]
        task = Task(
            id=new_id("task"),
            project_id="default",
            prompt=DEMO_TASK,
            repository=f"project:{project}",
        )
        conversation = new_id("conv")
        config, options = world.distributed(), RunOptions(loop="react")
        handle = await start_run(client, config, conversation, task=task, options=options)
        handles[conversation] = (project, handle)
    results = await asyncio.wait_for(
        asyncio.gather(*(handle.result() for _, handle in handles.values())), timeout=1200
    )
    for (conversation, (project, _)), result in zip(handles.items(), results, strict=True):
        assert result["termination_reason"] == "completed", (
            result,
            await _story(world, conversation),
        )
        assert result["commit_on_branch"], result
        await check_log(world, conversation)
        served = daemon.refs(project, f"refs/heads/synthorg/{conversation}")
        assert served == {f"refs/heads/synthorg/{conversation}": result["commit_sha"]}
        branch_tests_pass(daemon.bare(project), conversation)
    # The runs were spread over the machines, each working in its own data dir.
    used = [m for m in machines if any((m.home / "worktrees").glob("conv-*/*"))]
    assert len(used) >= 2, [m.home for m in machines]
