"""Every booted SynthOrg process sweeps dead owners' runs, at boot and every renewal interval
(issue 29, finding 1): a run whose owner died leaves `running` with nobody reading it."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from synthorg.domain import (
    ActionEvent,
    AgentIdentity,
    ConversationRecord,
    ConversationStatus,
    ObservationEvent,
    Task,
    new_id,
)
from synthorg.service.ownership import claim_run
from synthorg.store import RunClaimant, Store, open_store
from synthorg.store.codec import RESTART_OBSERVATION
from synthorg.store.protocol import ExecutionStatus
from synthorg.store.reconcile import sweep
from tests.faults.conftest import pg_schema  # noqa: F401  (the PostgreSQL parameter)
from tests.support import boot_real, scripted_settings

LEASE_S = 0.9
"""The run lease of the booted process: it sweeps every 0.3 s."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    url: str = request.getfixturevalue("pg_schema")
    return url


async def _dead_run(store: Store, lease_s: float) -> tuple[str, str]:
    """A running conversation whose owner (on another host, so only its lease tells) stops
    renewing now, with an open execution and a tool call in flight."""
    now = datetime.now(UTC)
    record = ConversationRecord(
        id=new_id("conv"),
        task=Task(id=new_id("task"), project_id="p", prompt="p", repository="/r"),
        agent=AgentIdentity(id="agent-1"),
        loop_type="react",
        model="m",
        status=ConversationStatus.RUNNING,
        created_at=now,
        updated_at=now,
    )
    await store.create_conversation(record)
    dead = RunClaimant(owner_id=new_id("own"), host="elsewhere", pid=1)
    await store.claim_conversation(record.id, dead, lease_s=lease_s)
    execution = new_id("exec")
    await store.open_execution(
        execution_id=execution,
        conversation_id=record.id,
        model="m",
        provider="scripted",
        cost_ceiling_usd=None,
    )
    await store.append(record.id, ActionEvent(action_id="a1", tool_name="terminal"))
    return record.id, execution


async def _swept(store: Store, conversation_id: str, execution_id: str) -> None:
    deadline = time.monotonic() + 60
    while (await store.get_conversation(conversation_id)).status is ConversationStatus.RUNNING:
        assert time.monotonic() < deadline, "nobody swept the dead owner's run"
        await asyncio.sleep(0.1)
    record = await store.get_conversation(conversation_id)
    assert record.status is ConversationStatus.INTERRUPTED
    assert "pid 1 on elsewhere" in (record.error or "")
    assert (await store.get_execution(execution_id)).status is ExecutionStatus.KILLED
    events = [s.event for s in await store.history(conversation_id, limit=100)]
    answers = [e for e in events if isinstance(e, ObservationEvent)]
    assert [(a.action_id, a.content) for a in answers] == [("a1", RESTART_OBSERVATION)]


async def test_a_booted_process_sweeps_dead_owners_at_boot_and_periodically(
    tmp_path: Path, store_url: str
) -> None:
    store = await open_store(store_url)
    try:
        before = await _dead_run(store, lease_s=0.05)  # dead before anyone booted
    finally:
        await store.close()
    settings = scripted_settings(
        tmp_path / "home", "demo", model="m", store={"url": store_url, "run_lease_s": LEASE_S}
    )
    async with boot_real(settings) as components:
        await _swept(components.store, *before)
        later = await _dead_run(components.store, lease_s=LEASE_S)  # dies while we live
        await _swept(components.store, *later)


async def test_a_start_racing_a_sweep_of_its_conversation_still_claims_it(
    tmp_path: Path, store_url: str
) -> None:
    """A resume's own boot sweeps while it claims: the sweep's brief reconciling claim must
    not refuse the start as 'already being run' (by this very process)."""
    store = await open_store(store_url)
    try:
        for _ in range(10):
            conversation, execution = await _dead_run(store, lease_s=0.01)
            await asyncio.sleep(0.02)  # the lease lapses (store clock): a dead owner
            _, run = await asyncio.gather(sweep(store), claim_run(store, conversation))
            assert (await store.get_execution(execution)).status is ExecutionStatus.KILLED
            await run.release()
    finally:
        await store.close()
