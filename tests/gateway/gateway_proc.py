"""A gateway in a process of its own, for the tests of budgets across processes.

Usage: python -m tests.gateway.gateway_proc STORE_URL HOME UPSTREAM_URL LEASE_S
Serves the gateway (the 'fake' provider in front of UPSTREAM_URL, the signing key under HOME,
its own connections to the store) on a free loopback port, prints ``ready <base url>`` and
serves until its stdin closes.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from synthorg.gateway.app import create_gateway_app, signer_for
from synthorg.gateway.embedded import serve_embedded
from synthorg.store import StoreConfig, open_store
from tests.gateway.harness import fake_config


async def main(url: str, home: str, upstream: str, lease_s: float) -> None:
    store = await open_store(StoreConfig(url=url))
    config = fake_config(Path(home), upstream, reservation_lease_s=lease_s)
    app = create_gateway_app(config, signer_for(config), store)
    try:
        async with serve_embedded(app, tcp_port=0) as served:
            print("ready", served.tcp_base_url, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        await app.gateway.aclose()
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
