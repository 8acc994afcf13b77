"""Eval items on both backends: upsert, prefix listing, newest eval first, durable across opens."""

from __future__ import annotations

from synthorg.store import Store, open_store


async def test_put_replaces_and_lists_by_prefix(store: Store) -> None:
    await store.put_eval_item("ev-a", "plan", {"arms": ["react", "hybrid"]})
    await store.put_eval_item("ev-a", "result/react/0/t1", {"resolved": True})
    await store.put_eval_item("ev-a", "result/react/0/t1", {"resolved": False})
    await store.put_eval_item("ev-a", "result/hybrid/0/t1", {"resolved": True})
    items = await store.eval_items("ev-a", "result/")
    assert items == {
        "result/hybrid/0/t1": {"resolved": True},
        "result/react/0/t1": {"resolved": False},
    }
    assert (await store.eval_items("ev-a"))["plan"] == {"arms": ["react", "hybrid"]}
    assert await store.eval_items("ev-none") == {}


async def test_prefix_is_literal_not_a_pattern(store: Store) -> None:
    await store.put_eval_item("ev-b", "result/a_b", {"n": 1})
    await store.put_eval_item("ev-b", "result/axb", {"n": 2})
    assert list(await store.eval_items("ev-b", "result/a_")) == ["result/a_b"]
    assert list(await store.eval_items("ev-b", "result/a%")) == []


async def test_items_survive_reopening(store_url: str) -> None:
    first = await open_store(store_url)
    try:
        await first.put_eval_item("ev-c", "plan", {"k": "v"})
    finally:
        await first.close()
    second = await open_store(store_url)
    try:
        assert await second.eval_items("ev-c") == {"plan": {"k": "v"}}
        assert "ev-c" in await second.eval_ids()
    finally:
        await second.close()
