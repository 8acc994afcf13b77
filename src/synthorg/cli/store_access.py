"""Opening the configured store from CLI commands."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from synthorg.settings import Settings, section
from synthorg.store import Store, StoreConfig, open_store


def store_config(settings: Settings) -> StoreConfig:
    """The ``[store]`` section."""
    return section(settings, "store", StoreConfig)


@asynccontextmanager
async def opened_store(settings: Settings) -> AsyncIterator[Store]:
    """The configured store, closed on exit."""
    config = store_config(settings)
    if config.url is None:
        config = config.model_copy(update={"url": config.resolved_url(settings.home)})
    store = await open_store(config)
    try:
        yield store
    finally:
        await store.close()
