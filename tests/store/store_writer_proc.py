"""A writer process for the crash and cross-process tests.

Usage: python store_writer_proc.py URL CONVERSATION_ID COUNT DELAY_S WRITERS
Appends COUNT events (``WRITERS`` concurrent tasks) and prints ``ack <seq> <text>`` after each
append returns, i.e. once the store has acknowledged it as durable. COUNT 0 means forever.
"""

from __future__ import annotations

import asyncio
import itertools
import sys

from synthorg.domain import MessageEvent
from synthorg.store import StoreConfig, open_store


async def main(url: str, conversation_id: str, count: int, delay: float, writers: int) -> None:
    store = await open_store(StoreConfig(url=url, poll_interval_s=0.05))
    numbers = itertools.count() if count == 0 else iter(range(count))

    async def writer(w: int) -> None:
        for n in numbers:
            text = f"w{w}-n{n}"
            stored = await store.append(conversation_id, MessageEvent(role="user", text=text))
            sys.stdout.write(f"ack {stored.seq} {text}\n")
            sys.stdout.flush()
            if delay:
                await asyncio.sleep(delay)

    print("ready", flush=True)
    await asyncio.gather(*(writer(w) for w in range(writers)))
    await store.close()
    print("done", flush=True)


if __name__ == "__main__":
    url, cid, count, delay, writers = sys.argv[1:6]
    asyncio.run(main(url, cid, int(count), float(delay), int(writers)))
