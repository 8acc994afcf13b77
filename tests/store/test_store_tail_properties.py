"""Property: concurrent appends and subscribers starting anywhere see every event once, in order."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import record

from synthorg.domain import ConversationEvent, MessageEvent
from synthorg.store import StoreConfig, open_store


@dataclass(frozen=True)
class Plan:
    """Writers (events each), and subscribers (start after n acks, resume fraction)."""

    writers: tuple[int, ...]
    second_store_writers: int
    subscribers: tuple[tuple[int, float], ...]

    @property
    def total(self) -> int:
        return sum(self.writers)


plans = st.builds(
    Plan,
    writers=st.lists(st.integers(1, 25), min_size=1, max_size=5).map(tuple),
    second_store_writers=st.integers(0, 2),
    subscribers=st.lists(
        st.tuples(st.integers(0, 125), st.floats(0, 1)), min_size=1, max_size=5
    ).map(tuple),
)


async def _scenario(url: str, plan: Plan) -> None:
    # Writers on a second store instance stand in for another process's connections.
    main = await open_store(StoreConfig(url=url, poll_interval_s=0.05))
    other = await open_store(StoreConfig(url=url, poll_interval_s=0.05))
    try:
        rec = record()
        await main.create_conversation(rec)
        acked: dict[int, ConversationEvent] = {}
        progress = asyncio.Condition()

        async def writer(w: int, count: int) -> None:
            store = other if w < plan.second_store_writers else main
            mine: list[int] = []
            for n in range(count):
                event = MessageEvent(role="user", text=f"w{w}-{n}")
                stored = await store.append(rec.id, event)
                assert stored.seq not in acked, "a seq was handed out twice"
                acked[stored.seq] = event
                mine.append(stored.seq)
                async with progress:
                    progress.notify_all()
                if n % 3 == 0:
                    await asyncio.sleep(0)
            assert mine == sorted(mine), "one writer's appends went backwards"

        async def subscriber(start_at: int, fraction: float) -> tuple[int, list[int], dict]:
            async with progress:
                await progress.wait_for(lambda: len(acked) >= min(start_at, plan.total))
            after = int(fraction * await main.last_seq(rec.id))
            seen: list[int] = []
            events: dict[int, ConversationEvent] = {}
            if after == plan.total:
                return after, seen, events
            async for stored in main.tail(rec.id, after=after):
                seen.append(stored.seq)
                events[stored.seq] = stored.event
                if stored.seq >= plan.total:
                    break
            return after, seen, events

        subs = [asyncio.create_task(subscriber(s, f)) for s, f in plan.subscribers]
        await asyncio.sleep(0)
        await asyncio.gather(*(writer(w, c) for w, c in enumerate(plan.writers)))
        results = await asyncio.wait_for(asyncio.gather(*subs), 30)

        assert sorted(acked) == list(range(1, plan.total + 1)), "gap in the acknowledged seqs"
        for after, seen, events in results:
            assert seen == list(range(after + 1, plan.total + 1)), (after, seen)
            assert all(events[seq] == acked[seq] for seq in seen)
        history = await main.history(rec.id, limit=10_000)
        assert [s.seq for s in history] == list(range(1, plan.total + 1))
    finally:
        await other.close()
        await main.close()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans)
def test_concurrent_appends_and_subscribes_are_gap_and_duplicate_free(
    store_url: str, plan: Plan
) -> None:
    asyncio.run(_scenario(store_url, plan))
