"""A killed run's bearer dies with its owner's lease, and the run is reconciled with no reader
(issue 29, finding 1).

A `synthorg run` (or the `synthorg serve` holding the run) is SIGKILLed mid-run. A gateway and
an MCP server with the same signing key over the same store, both on loopback HTTP, are shown
the run's bearer: accepted while the owner lives, refused from the moment the lease it renews
lapsed. A live process's periodic sweep (``sweep_dead_owners``, what every serve and worker
runs) takes the conversation out of ``running``: nobody reads it. (The bearer: see
``lease_support``.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from synthorg.domain import ActionEvent, ObservationEvent
from synthorg.store import open_store
from tests.faults.harness import Proc, World, synthorg
from tests.faults.lease_support import ELSEWHERE, boundaries, killed_then_lapsed_and_swept

pytestmark = [pytest.mark.faults, pytest.mark.bwrap]

LEASE_S = 6.0
"""Short enough for a test, long enough that a loaded machine's stalls never lose a live lease
(renewed every 2 s)."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    extra = f"run_lease_s = {LEASE_S}\n"
    if request.param == "sqlite":
        return World(tmp_path, str(tmp_path / "store" / "store.db"), extra)
    url: str = request.getfixturevalue("pg_schema")
    return World(tmp_path, url, extra)


async def _start_holder(world: World, holder: str, repo: Path) -> tuple[Proc, Proc | None]:
    """The process that will own the run: `synthorg run` itself, or a serve it hands it to."""
    if holder == "run":
        return await synthorg(world, *_ENDLESS, str(repo), prefix=ELSEWHERE), None
    serve = await synthorg(
        world, "serve", "--port", "0", prefix=ELSEWHERE, env={"SYNTHORG_LOG_LEVEL": "INFO"}
    )
    ready = serve.watch("SERVER_STARTED")
    await asyncio.wait_for(ready.wait(), 300)  # its local socket listens: runs go to it
    return await synthorg(world, *_ENDLESS, str(repo)), serve


_ENDLESS = ("run", "keep going", "--model", "endless", "--max-turns", "9999", "--repo")


@pytest.mark.timeout(600)  # a serve start, two runs and a lapse: past 300 s at load 30
@pytest.mark.parametrize("holder", ["run", "serve"])
async def test_a_killed_owners_bearer_dies_with_its_lease_and_the_run_is_swept(
    world: World, holder: str
) -> None:
    client, serve = await _start_holder(world, holder, world.repo("r"))
    owner = serve or client
    acting = client.watch("▶ terminal")
    conversation = await client.conversation_id()
    await asyncio.wait_for(acting.wait(), 300)  # inside its run: the lease is being renewed

    store = await open_store(world.store_url)
    try:
        async with boundaries(world, store, conversation) as run:
            await killed_then_lapsed_and_swept(run, owner, LEASE_S, holder)
            events = [s.event for s in await store.history(conversation, limit=10_000)]
            actions = [e.action_id for e in events if isinstance(e, ActionEvent)]
            answered = [e.action_id for e in events if isinstance(e, ObservationEvent)]
            assert actions and sorted(answered) == sorted(actions)  # each answered once
            record = await store.get_conversation(conversation)
            assert f"pid {owner.proc.pid} on synthorg-elsewhere" in (record.error or "")
            assert await store.conversation_owner(conversation) is None
            for call in (run.fetch, run.push):  # killed now: refused for good
                text, failed = await call()
                assert failed and "was killed" in text, text

            # Resume (finding 3): the new execution gets its own bearer; the old one stays dead.
            resumed = await synthorg(world, "run", "--resume", conversation)
            acting = resumed.watch("▶ terminal")
            await asyncio.wait_for(acting.wait(), 300)
            async with boundaries(world, store, conversation) as again:
                assert again.execution_id != run.execution_id
                assert (await again.chat()).status_code == 200
                text, failed = await again.fetch()
                assert not failed and "fetched while alive" in text, text
                old = await run.chat()
                assert old.status_code == 403, old.text
                assert old.json()["error"]["code"] == "execution_killed", old.text
                text, failed = await run.fetch()
                assert failed and "was killed" in text, text
            resumed.proc.kill()
            await resumed.exit()
    finally:
        await store.close()
    if client.proc.returncode is None:
        client.proc.kill()
    await client.exit()
