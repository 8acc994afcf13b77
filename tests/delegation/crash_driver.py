"""A host to be SIGKILLed mid-delegation: boots the service, starts the parent, prints its id.

Usage: python crash_driver.py HOME REPO PROMPT_FILE [BUDGET_USD]
"""

from __future__ import annotations

import asyncio
import sys
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.options import RunOptions
from tests import support
from tests.delegation.conftest import MODEL, OUTPUT_CAP, SCRIPT


async def main(home: Path, repo: Path, prompt: str, budget: Decimal | None) -> None:
    settings = support.scripted_settings(home, SCRIPT, model=MODEL, latency_ms=150)
    settings.sections["gateway"]["max_output_tokens"] = {MODEL: OUTPUT_CAP}
    # What it holds when it is killed expires soon, so the test can let it be billed first.
    settings.sections["gateway"]["reservation_lease_s"] = 2.0
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner) as c:
        options = RunOptions(budget_usd=budget, max_turns=500)
        record = await c.service.create(support.make_task(repo, prompt), options)
        print(record.id, flush=True)
        await c.service.run(record.id)  # killed long before it ends


if __name__ == "__main__":
    budget = Decimal(sys.argv[4]) if len(sys.argv) > 4 else None
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]).read_text(), budget))
