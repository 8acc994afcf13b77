"""What `synthorg serve` runs with ``engine = "temporal"``: the store and the Temporal service.

No gateway, MCP server or sandbox here (workers have them): the API server reads the shared
store and drives runs through Temporal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from synthorg.distributed.config import DistributedConfig
from synthorg.distributed.service import TemporalRunService
from synthorg.distributed.worker import connect, require_shared_store
from synthorg.service.store import opened_store
from synthorg.settings import Settings
from synthorg.store import Store


@asynccontextmanager
async def temporal_service(
    settings: Settings, config: DistributedConfig
) -> AsyncIterator[tuple[Store, TemporalRunService]]:
    """The shared store and a run service over Temporal, closed on exit (runs go on)."""
    require_shared_store(settings)
    client = await connect(config)
    async with opened_store(settings) as store:
        service = TemporalRunService(
            client,
            config,
            store,
            engine=settings.engine,
        )
        await service.open()
        try:
            yield store, service
        finally:
            await service.shutdown()
