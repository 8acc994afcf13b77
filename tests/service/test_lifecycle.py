"""How runs end, through the real service: NO_OP by content, gate refusal, turns when cut short."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from synthorg.domain import ConversationStatus, StoredEvent, TerminationReason
from synthorg.engine.bearers import RunGrant
from synthorg.gateway.signer import UnboundModelError
from synthorg.service.bearers import GatewayMinter
from synthorg.service.boot import Components
from synthorg.service.options import RunOptions

from .conftest import Booter, make_task

pytestmark = pytest.mark.bwrap
SCRIPTS = f"{__name__.rsplit('.', 1)[0]}.scripts"


async def _nth(components: Components, cid: str, kind: str, n: int) -> StoredEvent:
    """The n-th event of ``kind`` in the conversation's log, as soon as it is durable."""

    async def find() -> StoredEvent:
        seen = 0
        async for stored in components.store.tail(cid):
            if stored.event.kind == kind:
                seen += 1
                if seen == n:
                    return stored
        raise AssertionError("the live tail ended")

    return await asyncio.wait_for(find(), 60)


async def _log_agrees_with_record(components: Components, cid: str) -> ConversationStatus:
    record = await components.store.get_conversation(cid)
    changes = [
        e.event
        for e in await components.store.history(cid, limit=10_000)
        if e.event.kind == "status_change"
    ]
    assert changes[-1].new is record.status  # type: ignore[union-attr]
    return record.status


async def test_cancelled_run_reports_the_turns_it_made(booted: Booter, demo_repo: Path) -> None:
    async with booted("endless_script", latency_ms=20) as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions(max_turns=500))
        await service.start(record.id)
        await _nth(components, record.id, "observation", 3)
        await service.cancel(record.id, by="tester")
        result = await service.wait(record.id)
        assert result is not None and result.termination_reason is TerminationReason.CANCELLED
        assert len(result.turns) >= 3
        assert all(turn.tool_names == ("terminal",) for turn in result.turns)
        final = await components.store.get_conversation(record.id)
        assert final.turns == len(result.turns)
        assert await _log_agrees_with_record(components, record.id) is ConversationStatus.CANCELLED


async def test_a_fresh_run_that_changed_nothing_is_no_op(booted: Booter, demo_repo: Path) -> None:
    """It ran a work tool (ls), so counting tool calls called it a success."""
    async with booted(f"{SCRIPTS}:look_then_finish") as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions())
        result = await service.run(record.id)
        assert result.termination_reason is TerminationReason.NO_OP
        assert result.error is not None and "unchanged" in result.error
        assert result.commit_sha is None
        assert await _log_agrees_with_record(components, record.id) is ConversationStatus.FAILED
        kinds = [e.event.kind for e in await components.store.history(record.id, limit=1000)]
        assert "finished" not in kinds


async def test_a_resumed_run_that_changed_nothing_is_no_op(booted: Booter, demo_repo: Path) -> None:
    """14.4: a resumed run used to be exempt, and ended `finished` with nothing done."""
    async with booted(f"{SCRIPTS}:look_until_resumed", latency_ms=20) as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions())
        await service.start(record.id)
        await _nth(components, record.id, "observation", 1)
        await service.interrupt(record.id, by="tester")
        first = await service.wait(record.id)
        assert first is not None and first.termination_reason is TerminationReason.PAUSED
        result = await service.run(record.id)
        assert result.resumed
        assert result.termination_reason is TerminationReason.NO_OP
        assert await _log_agrees_with_record(components, record.id) is ConversationStatus.FAILED


async def test_a_refused_landing_is_evented(booted: Booter, demo_repo: Path) -> None:
    """The gate's refusal used to save FAILED without its StatusChangeEvent."""
    async with booted(f"{SCRIPTS}:leak_a_secret") as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions())
        result = await service.run(record.id)
        assert result.error is not None and ".env" in result.error
        assert result.commit_sha is None
        assert await _log_agrees_with_record(components, record.id) is ConversationStatus.FAILED
        codes = [
            e.event.code  # type: ignore[union-attr]
            for e in await components.store.history(record.id, limit=1000)
            if e.event.kind == "error"
        ]
        assert "commit_gate_refused" in codes


async def test_one_bearer_per_run_bound_to_the_run(booted: Booter, demo_repo: Path) -> None:
    """The service mints the run's one bearer; an unbound model is refused at the mint."""
    async with booted("demo_fix_script") as components:
        record = await components.service.create(make_task(demo_repo), RunOptions())
        minter = GatewayMinter(components.gateway)
        bearer = await minter.open(RunGrant.of(record, "exec-one"))
        claims = components.gateway.signer.verify(bearer)
        assert (claims.execution_id, claims.conversation_id, claims.model_id) == (
            "exec-one",
            record.id,
            record.model,
        )
        unbound = RunGrant.of(record.model_copy(update={"model": "gpt-unbound"}), "exec-two")
        with pytest.raises(UnboundModelError, match="gpt-unbound"):
            await minter.open(unbound)
        await minter.close("exec-one", "test over")
