"""What `synthorg doctor` asks Temporal: is the frontend reachable, which workers poll."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, GetSystemInfoRequest

from synthorg.distributed.config import DistributedConfig
from synthorg.distributed.worker import connect


@dataclass(frozen=True)
class TemporalHealth:
    """The server's version and the identities of the workers polling the run queue."""

    server_version: str
    workers: tuple[str, ...]


async def probe(config: DistributedConfig, *, timeout_s: float = 5.0) -> TemporalHealth:
    """Connect and describe the run queue (activity pollers are the workers that run loops)."""
    async with asyncio.timeout(timeout_s):
        client = await connect(config)
        system = await client.workflow_service.get_system_info(GetSystemInfoRequest())
        described = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=config.namespace,
                task_queue=TaskQueue(name=config.task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            )
        )
    workers = tuple(sorted({poller.identity for poller in described.pollers}))
    return TemporalHealth(server_version=system.server_version, workers=workers)
