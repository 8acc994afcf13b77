"""A host process running one OpenHands conversation through the real service, to be SIGKILLed.

Usage: python host_driver.py HOME REPO SCRIPT [POLICY]. Prints {"conversation_id": ...}, then
{"kind": ...} for each event of the run as soon as it is durable.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout: `tests` imports

from synthorg.domain import ConfirmationPolicy
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.options import RunOptions
from tests.engine.openhands.e2e_support import make_settings, make_task


async def main(home: Path, repo: Path, script: str, policy: str) -> None:
    settings = make_settings(home, script)
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        options = RunOptions(loop="openhands", confirmation_policy=ConfirmationPolicy(policy))
        record = await c.service.create(make_task(repo), options)
        print(json.dumps({"conversation_id": record.id}), flush=True)
        await c.service.start(record.id)
        async for stored in c.store.tail(record.id):
            print(json.dumps({"kind": stored.event.kind}), flush=True)


if __name__ == "__main__":
    policy = sys.argv[4] if len(sys.argv) > 4 else "never"
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], policy))
