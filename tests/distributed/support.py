"""Worlds whose runs go through Temporal: config, workers, and a client for the test."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

from temporalio.client import Client

from tests.faults.harness import Proc, World, synthorg

READY_S = 300.0  # a worker boots the whole stack; on a loaded 2-core machine that takes a while
HEARTBEAT_S = 4.0


def temporal_world(root: Path, store_url: str, address: str) -> World:
    """A world whose config sends runs to Temporal on its own task queue."""
    queue = f"q-{secrets.token_hex(4)}"
    extra = (
        f'[distributed]\nengine = "temporal"\naddress = "{address}"\n'
        f'task_queue = "{queue}"\nheartbeat_timeout_s = {HEARTBEAT_S}\n'
    )
    return World(root, store_url, store_extra=extra)


async def start_worker(world: World) -> Proc:
    """A `synthorg worker` process, returned once it polls."""
    worker = await synthorg(world, "worker")
    ready = worker.watch(" ready: ")
    waiting = asyncio.ensure_future(ready.wait())
    exited = asyncio.ensure_future(worker.proc.wait())
    done, _ = await asyncio.wait(
        {waiting, exited}, timeout=READY_S, return_when=asyncio.FIRST_COMPLETED
    )
    exited.cancel()
    assert waiting in done, f"worker not ready; output:\n{worker.output}"
    return worker


async def client_of(world: World, address: str) -> Client:
    """A Temporal client of the world's namespace."""
    return await Client.connect(address)
