"""One live process per conversation, across processes: a second runner is refused by name;
once the owner is killed, `synthorg conversations show` reconciles it (interrupted, each open
action answered once)."""

from __future__ import annotations

import collections
import socket
from pathlib import Path

import pytest

from synthorg.domain import ActionEvent, ConversationStatus, ObservationEvent, StatusChangeEvent
from synthorg.store import open_store
from tests.faults.harness import World, no_traceback, resume, start_endless, synthorg

pytestmark = [pytest.mark.faults, pytest.mark.bwrap]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    if request.param == "sqlite":
        return World(tmp_path, str(tmp_path / "store" / "store.db"))
    url: str = request.getfixturevalue("pg_schema")
    return World(tmp_path, url)


async def test_a_second_runner_is_refused_then_a_dead_owner_is_reconciled(world: World) -> None:
    first = await start_endless(world, world.repo("r"))
    acting = first.watch("▶ terminal")
    conversation = await first.conversation_id()
    await acting.wait()  # the first process is inside its run: it owns the conversation

    second = await resume(world, conversation)
    code = await second.exit()
    assert first.proc.returncode is None, first.output  # still running: the refusal was live
    assert code == 2, second.output
    flat = " ".join(second.output.split())
    assert f"already being run by pid {first.proc.pid} on {socket.gethostname()} since" in flat
    no_traceback(second.output)

    first.proc.kill()
    await first.exit()
    shown = await synthorg(world, "conversations", "show", conversation)
    assert await shown.exit() == 0, shown.output
    assert "interrupted" in shown.output

    store = await open_store(world.store_url)
    try:
        record = await store.get_conversation(conversation)
        events = [s.event for s in await store.history(conversation, limit=10_000)]
        assert await store.conversation_owner(conversation) is None
    finally:
        await store.close()
    assert record.status is ConversationStatus.INTERRUPTED
    assert f"pid {first.proc.pid}" in (record.error or "")
    actions = [e.action_id for e in events if isinstance(e, ActionEvent)]
    observed = collections.Counter(e.action_id for e in events if isinstance(e, ObservationEvent))
    assert actions and all(observed[a] == 1 for a in actions), (actions, observed)
    changes = [e for e in events if isinstance(e, StatusChangeEvent)]
    assert [c.new for c in changes].count(ConversationStatus.INTERRUPTED) == 1
