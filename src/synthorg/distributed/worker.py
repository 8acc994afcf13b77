"""A worker process: the embedded gateway/MCP/sandbox stack, polling Temporal for runs."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
from collections.abc import Callable

from temporalio.client import Client
from temporalio.worker import Worker

from synthorg.distributed import attributes
from synthorg.distributed.activities import RunActivities
from synthorg.distributed.config import DistributedConfig
from synthorg.distributed.names import worker_queue
from synthorg.distributed.pulse import keep_pulse
from synthorg.distributed.workflow import (
    CreateWorkflow,
    DeleteWorkflow,
    RollbackWorkflow,
    RunWorkflow,
)
from synthorg.errors import ConfigError
from synthorg.logging import get_logger
from synthorg.server.config import ServerSettings
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.ownership import OwnershipPolicy
from synthorg.service.store import store_config
from synthorg.settings import Settings, section

_log = get_logger("synthorg.distributed")


def worker_id() -> str:
    """This process's name in Temporal (host, pid and a nonce: pids are reused)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


async def connect(config: DistributedConfig) -> Client:
    """A client of the configured Temporal namespace."""
    return await Client.connect(config.address, namespace=config.namespace)


def require_shared_store(settings: Settings) -> None:
    """ConfigError unless the store is PostgreSQL (the one every worker and server shares)."""
    if not store_config(settings).resolved_url(settings.home).startswith("postgresql"):
        raise ConfigError(
            "the temporal engine needs the PostgreSQL store every worker and server shares: "
            'set [store] url = "postgresql://..."'
        )


async def serve_worker(
    settings: Settings, config: DistributedConfig, *, announce: Callable[[str], None]
) -> None:
    """Run activities (and the workflow) until SIGTERM/SIGINT; runs then stop resumable.

    A run stopped by this worker's shutdown ends SHUTDOWN, which its activity reports as a
    retryable failure: Temporal resumes it on another worker from the durable log.
    """
    require_shared_store(settings)
    client = await connect(config)
    await attributes.register(client, config.namespace)  # the workflow sets them
    async with boot(
        settings,
        registry=default_registry(),
        provisioner=default_provisioner,
        # Whoever can start a workflow in the namespace names the repository: the worker
        # applies the server's rule ([server] repository_roots, [mcp] projects), not the
        # terminal's, at creation and at every start.
        repositories=section(settings, "server", ServerSettings).repository_policy(settings),
        # The lease follows the heartbeat timeout unless set: a frozen or cut-off worker's
        # run is taken over soon after Temporal moved its activity, not 30 s later.
        ownership=OwnershipPolicy(
            lease_s=config.owner_lease_s or 2 * config.heartbeat_timeout_s, fence=True
        ),
        # Like serve: [openhands] pool_size sandboxes wait with the SDK imported, each used
        # one replaced (a worker's runs arrive over its lifetime, as a server's do).
        openhands_pool="kept",
    ) as components:
        name = worker_id()
        own = worker_queue(config.task_queue, name)
        acts = RunActivities(components, client, own, config.heartbeat_timeout_s)
        runs = Worker(
            client,
            task_queue=config.task_queue,
            workflows=[RunWorkflow, CreateWorkflow, RollbackWorkflow, DeleteWorkflow],
            activities=[
                acts.prepare_workspace,
                acts.run_loop,
                acts.confirm_landing,
                acts.rollback_workspace,
                acts.delete_conversation,
            ],
            max_concurrent_activities=config.concurrency,
            identity=name,
        )
        control = Worker(client, task_queue=own, activities=[acts.apply_control], identity=name)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        polling = [
            asyncio.create_task(w.run(), name=f"worker-{q}")
            for w, q in ((runs, "runs"), (control, "control"))
        ]
        announce(
            f"worker {name} ready: {config.address} namespace {config.namespace} "
            f"queue {config.task_queue} concurrency {config.concurrency}"
        )
        _log.info("WORKER_READY", worker=name, queue=config.task_queue, own_queue=own)
        health = config.health_path(settings.home)

        async def healthy() -> bool:
            # What its run leases are renewed in answers, and it still polls Temporal.
            await components.store.count_conversations()
            return not any(task.done() for task in polling)

        pulse = asyncio.create_task(
            keep_pulse(
                health, worker=name, interval_s=config.heartbeat_timeout_s / 4, healthy=healthy
            ),
            name="worker-pulse",
        )
        stopping = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait(
            {stopping, pulse, *polling}, return_when=asyncio.FIRST_COMPLETED
        )
        pulse.cancel()
        health.unlink(missing_ok=True)  # stopping: no longer a healthy worker
        # Runs first (they end SHUTDOWN and report it), then stop polling.
        await components.service.shutdown()
        await asyncio.gather(runs.shutdown(), control.shutdown())
        for task in done:
            if task is not stopping:
                task.result()  # a poller that failed: say why
