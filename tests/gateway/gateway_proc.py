"""A gateway in a process of its own, for the tests of budgets across processes.

Usage: python -m tests.gateway.gateway_proc STORE_URL CONFIG_JSON
Serves the gateway configured by the file CONFIG_JSON (a ``GatewayConfig``), with its own
connections to the store, on a free loopback port, prints ``ready <base url>`` and serves until
its stdin closes. (It imports no test helper: a loaded machine starts it sooner.)
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.config import GatewayConfig
from synthorg.gateway.embedded import serve_embedded
from synthorg.store import StoreConfig, open_store


async def main(url: str, config_file: str) -> None:
    config = GatewayConfig.model_validate_json(Path(config_file).read_text())
    store = await open_store(StoreConfig(url=url))
    app = create_gateway_app(config, signer_for(config), store)
    try:
        async with serve_embedded(app, tcp_port=0) as served:
            print("ready", served.tcp_base_url, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        await app.gateway.aclose()
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
