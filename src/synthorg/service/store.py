"""Opening the configured store: the `[store]` section resolved under the settings' home."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from synthorg.settings import Settings, section
from synthorg.store import Store, StoreConfig, open_store


def store_config(settings: Settings) -> StoreConfig:
    """The ``[store]`` section, its default location resolved under the settings' home."""
    config = section(settings, "store", StoreConfig)
    if config.url is None:
        config = config.model_copy(update={"url": config.resolved_url(settings.home)})
    return config


@asynccontextmanager
async def opened_store(settings: Settings) -> AsyncIterator[Store]:
    """The configured store, closed on exit."""
    store = await open_store(store_config(settings))
    try:
        yield store
    finally:
        await store.close()
