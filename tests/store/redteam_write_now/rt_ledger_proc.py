"""One gateway-like process hammering the shared ledger: TASKS concurrent request loops, each
holding WORST under the shared rule and billing WORST, until the ceiling refuses. Waits for a
line on stdin before starting; prints one JSON line with what it admitted and billed."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from decimal import Decimal
from pathlib import Path

from synthorg.store.sqlite import SqliteStore
from tests.store.redteam_write_now.rt_ledger import Refused, new_hold, rule

verbose = False


async def main(
    path: str,
    execution: str,
    conversation: str,
    tasks: int,
    worst: str,
    ceiling: str,
    lease: float = 60.0,
) -> None:
    store = await SqliteStore.open(Path(path))
    w, c = Decimal(worst), Decimal(ceiling)
    admitted = 0
    billed = Decimal(0)
    here = 0
    queued = 0
    base = rule(c, w)

    def admit(figures):
        nonlocal here, queued
        if threading.current_thread() is threading.main_thread():
            here += 1
        else:
            queued += 1
        return base(figures)

    async def loop() -> None:
        nonlocal admitted, billed
        while True:
            hold = new_hold(execution, conversation, w)
            wait = 0.001
            try:
                while not await store.reserve_budget(hold, holder="h", lease_s=lease, admit=admit):
                    await asyncio.sleep(wait)  # the product's own poll (SharedBudget.hold)
                    wait = min(wait * 2, 0.02)
            except Refused:
                return
            admitted += 1
            if verbose:
                print(f"admit {hold.reservation_id}", flush=True)
            await store.settle_reservation(hold, tokens_in=1, tokens_out=1, cost_usd=w)
            billed += w

    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await asyncio.gather(*(loop() for _ in range(tasks)))
    holding = len(store._in_flight())
    await store.close()
    print(
        json.dumps(
            {
                "admitted": admitted,
                "billed": str(billed),
                "here": here,
                "queued": queued,
                "holding": holding,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    p, e, cv, t, w, c = sys.argv[1:7]
    lease_s = float(sys.argv[7]) if len(sys.argv) > 7 else 60.0
    verbose = len(sys.argv) > 8
    asyncio.run(main(p, e, cv, int(t), w, c, lease_s))
