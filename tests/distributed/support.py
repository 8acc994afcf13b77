"""Worlds whose runs go through Temporal: config, workers, and a client for the test."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from temporalio.client import Client

from synthorg.distributed.config import DistributedConfig
from synthorg.domain import ActionEvent, ConversationEvent, ConversationStatus, StatusChangeEvent
from synthorg.errors import NotFoundError
from synthorg.service.demo import DEMO_TASK
from synthorg.store import open_store
from tests.distributed.scripts import SLOW_COMMAND
from tests.faults.harness import ENDLESS, SCRIPT, Proc, World, synthorg

SLOW = "tests.distributed.scripts:slow_then_fix"
MARKED = "tests.distributed.scripts:marked_fix"
FROZEN = "tests.distributed.scripts:frozen_then_fix"

MODELS = ("m", "endless", "slow", "marked", "frozen")
"""The scripted provider's models in a TemporalWorld's config."""

READY_S = 300.0  # a worker boots the whole stack; on a loaded 2-core machine that takes a while
HEARTBEAT_S = 4.0


@dataclass(frozen=True)
class TemporalWorld(World):
    """A world whose config sends runs to Temporal on its own task queue."""

    address: str = ""
    task_queue: str = field(default_factory=lambda: f"q-{secrets.token_hex(4)}")
    extra_toml: str = ""
    """More configuration (e.g. model prices), appended."""

    @property
    def config(self) -> Path:
        path = self.root / "synthorg.toml"
        if not path.exists():
            path.write_text(
                '[[gateway.providers]]\nname = "scripted"\nkind = "scripted"\n'
                f"models = {json.dumps(list(MODELS))}\n"
                f'script = "{SCRIPT}"\nlatency_ms = 100\n'
                f'scripts = {{ endless = "{ENDLESS}", slow = "{SLOW}", marked = "{MARKED}", '
                f'frozen = "{FROZEN}" }}\n'
                '[run]\nmodel = "m"\nshutdown_grace_s = 0.5\n'
                '[sandbox]\nbackend = "bwrap"\n'
                f'[store]\nurl = "{self.store_url}"\n'
                # Workers apply the server's repository rule to what a workflow names.
                f'[server]\nrepository_roots = ["{self.root / "repos"}"]\n'
                f'[distributed]\nengine = "temporal"\naddress = "{self.address}"\n'
                f'task_queue = "{self.task_queue}"\nheartbeat_timeout_s = {HEARTBEAT_S}\n'
                + self.extra_toml
            )
        return path

    def distributed(self) -> DistributedConfig:
        """The same settings, for a client in the test."""
        return DistributedConfig(
            address=self.address, task_queue=self.task_queue, heartbeat_timeout_s=HEARTBEAT_S
        )


async def start_worker(
    world: World, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> Proc:
    """A `synthorg worker` process, returned once it polls (``prefix``, ``env``: see
    ``synthorg``)."""
    worker = await synthorg(world, "worker", prefix=prefix, env=env)
    ready = worker.watch(" ready: ")
    waiting = asyncio.ensure_future(ready.wait())
    exited = asyncio.ensure_future(worker.proc.wait())
    done, _ = await asyncio.wait(
        {waiting, exited}, timeout=READY_S, return_when=asyncio.FIRST_COMPLETED
    )
    exited.cancel()
    assert waiting in done, f"worker not ready; output:\n{worker.output}"
    return worker


def sandboxes_under(pid: int) -> list[str]:
    """The bwrap processes below ``pid`` (a worker): none once its runs have stopped."""
    return [p.name() for p in psutil.Process(pid).children(recursive=True) if "bwrap" in p.name()]


async def client_of(world: TemporalWorld) -> Client:
    """A Temporal client of the world's namespace."""
    return await Client.connect(world.address)


async def slow_action(world: World, conversation: str, command: str = SLOW_COMMAND) -> str:
    """The id of the slow tool call (``command``), once it is logged (the worker is inside
    it)."""
    store = await open_store(world.store_url)
    try:
        async with asyncio.timeout(300):
            while True:
                try:
                    async for stored in store.tail(conversation):
                        event = stored.event
                        if isinstance(event, ActionEvent) and command in str(event.arguments):
                            return event.action_id
                except NotFoundError:  # the first activity has not created it yet
                    await asyncio.sleep(0.2)
    finally:
        await store.close()


async def start_slow_run(world: World, name: str) -> tuple[Path, Proc, str, str]:
    """``synthorg run --engine temporal`` of the demo task on the slow model, once a worker is
    inside its slow tool call: (repo, the run's process, conversation id, slow action id)."""
    repo = world.repo(name)
    run = await synthorg(
        world, "run", DEMO_TASK, "--repo", str(repo), "--loop", "react", "--model", "slow",
        "--engine", "temporal",
    )  # fmt: skip
    conversation = await run.conversation_id()
    return repo, run, conversation, await slow_action(world, conversation)


async def kill_holder(world: World, workers: list[Proc], conversation: str) -> int:
    """SIGKILL the worker that owns the conversation now; its index in ``workers``."""
    store = await open_store(world.store_url)
    try:
        owner = await store.conversation_owner(conversation)
    finally:
        await store.close()
    assert owner is not None
    (held,) = [i for i, w in enumerate(workers) if w.proc.pid == owner.pid]
    os.kill(owner.pid, signal.SIGKILL)
    await workers[held].exit()
    return held


async def events_of(world: World, conversation: str) -> list[ConversationEvent]:
    """The conversation's whole log, from the shared store."""
    store = await open_store(world.store_url)
    try:
        return [s.event for s in await store.history(conversation, limit=10_000)]
    finally:
        await store.close()


async def taken_over(world: World, conversation: str) -> None:
    """Until another worker took the conversation over (INTERRUPTED -> RUNNING is logged)."""
    store = await open_store(world.store_url)
    try:
        async with asyncio.timeout(300):
            async for stored in store.tail(conversation):
                event = stored.event
                if (
                    isinstance(event, StatusChangeEvent)
                    and event.new is ConversationStatus.RUNNING
                    and event.old is ConversationStatus.INTERRUPTED
                ):
                    return
    finally:
        await store.close()
