"""How runs end, through the real service: NO_OP by content, gate refusal, turns when cut short."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from synthorg.domain import ConversationStatus, StatusChangeEvent, StoredEvent, TerminationReason
from synthorg.domain.binding import RunBinding
from synthorg.engine import LoopDependencies
from synthorg.errors import NotFoundError
from synthorg.gateway.signer import UnboundModelError
from synthorg.service.bearers import GatewayMinter
from synthorg.service.boot import Components, boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.options import RunOptions
from synthorg.service.provisioning import LoopEndpoints, LoopProvisioner, ProvisionContext, RunSetup
from tests.support import scripted_settings, terminations_logged

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
    """The service mints the run's one bearer; an unbound model is refused at the mint, and
    opens no ledger row."""
    async with booted("demo_fix_script") as components:
        record = await components.service.create(make_task(demo_repo), RunOptions())
        minter = GatewayMinter(components.gateway)
        bearer = await minter.open(RunBinding.of(record, "exec-one"))
        claims = components.gateway.signer.verify(bearer)
        assert (claims.execution_id, claims.conversation_id, claims.model_id) == (
            "exec-one",
            record.id,
            record.model,
        )
        unbound = RunBinding.of(record.model_copy(update={"model": "gpt-unbound"}), "exec-two")
        with pytest.raises(UnboundModelError, match="gpt-unbound"):
            await minter.open(unbound)
        with pytest.raises(NotFoundError):  # refused before its ledger row was opened
            await components.store.get_execution("exec-two")
        await minter.close("exec-one", "test over")


async def _status_changes(components: Components, cid: str) -> list[StatusChangeEvent]:
    return [
        e.event
        for e in await components.store.history(cid, limit=10_000)
        if isinstance(e.event, StatusChangeEvent)
    ]


async def test_a_run_refused_before_start_ends_through_the_one_finish(
    booted: Booter, demo_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal of a worktree that is not the recorded one was closed outside
    ``finish_run``: no EXECUTION_LOOP_TERMINATED, no termination reason on the record."""
    async with booted("demo_fix_script") as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions())
        assert record.workspace is not None
        moved = record.workspace.model_copy(update={"path": f"{record.workspace.path}-elsewhere"})
        await components.store.save_conversation(record.model_copy(update={"workspace": moved}))
        result = await service.run(record.id)
        assert result.termination_reason is TerminationReason.ERROR
        assert result.error is not None and "refusing" in result.error
        changes = await _status_changes(components, record.id)
        assert [c.new for c in changes] == [ConversationStatus.FAILED]  # the loop never ran
        assert changes[-1].termination_reason == TerminationReason.ERROR.value
        final = await components.store.get_conversation(record.id)
        assert final.termination_reason is TerminationReason.ERROR
    [logged] = terminations_logged(capsys.readouterr().err, record.id)
    assert logged["termination_reason"] == "error"


class _HeldProvisioner:
    """The real provisioner with a gate where the test acts: before setup or after teardown."""

    def __init__(self, inner: LoopProvisioner, at: str) -> None:
        self._inner = inner
        self._at = at
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    def check(self, loop_type: str) -> None:
        self._inner.check(loop_type)

    async def _gate(self, where: str) -> None:
        if where == self._at:
            self.reached.set()
            await self.release.wait()

    @asynccontextmanager
    async def __call__(
        self, setup: RunSetup
    ) -> AsyncIterator[tuple[LoopDependencies, LoopEndpoints]]:
        await self._gate("setup")
        async with self._inner(setup) as provisioned:
            yield provisioned
        await self._gate("teardown")


@asynccontextmanager
async def _boot_held(tmp_path: Path, at: str) -> AsyncIterator[tuple[Components, _HeldProvisioner]]:
    held: list[_HeldProvisioner] = []

    def provisioner(ctx: ProvisionContext) -> LoopProvisioner:
        held.append(_HeldProvisioner(default_provisioner(ctx), at))
        return held[-1]

    settings = scripted_settings(
        tmp_path / "home", "synthorg.engine.native.scripts:demo_fix_script", model="scripted-test"
    )
    async with boot(settings, registry=default_registry(), provisioner=provisioner) as components:
        yield components, held[0]


@pytest.mark.parametrize(
    ("stop", "reason"),
    [("interrupt", TerminationReason.PAUSED), ("cancel", TerminationReason.CANCELLED)],
)
async def test_a_run_stopped_before_start_ends_through_the_one_finish(
    tmp_path: Path,
    demo_repo: Path,
    capsys: pytest.CaptureFixture[str],
    stop: str,
    reason: TerminationReason,
) -> None:
    async with _boot_held(tmp_path, "setup") as (components, held):
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions())
        await service.start(record.id)
        await asyncio.wait_for(held.reached.wait(), 60)
        await getattr(service, stop)(record.id, by="tester")
        result = await service.wait(record.id)
        assert result is not None and result.termination_reason is reason
        changes = await _status_changes(components, record.id)
        assert [c.new for c in changes] == [reason.conversation_status()]  # never RUNNING
        assert changes[-1].termination_reason == reason.value
    [logged] = terminations_logged(capsys.readouterr().err, record.id)
    assert logged["termination_reason"] == reason.value


@pytest.mark.parametrize("stop", ["interrupt", "cancel", "shutdown"])
async def test_a_stop_after_the_loop_ended_lets_the_run_close(
    tmp_path: Path, demo_repo: Path, stop: str
) -> None:
    """A stop that arrived while the sandbox was torn down cancelled the closing run: the
    result was lost and the conversation stayed RUNNING (a shutdown after its grace did it)."""
    async with _boot_held(tmp_path, "teardown") as (components, held):
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions())
        await service.start(record.id)
        await asyncio.wait_for(held.reached.wait(), 60)
        active = service.active_run(record.id)
        assert active is not None
        if stop == "shutdown":  # past its grace: the run is still tearing down
            stopping = asyncio.create_task(service.shutdown())
        else:
            stopping = asyncio.create_task(getattr(service, stop)(record.id, by="tester"))
        async with asyncio.timeout(60):
            while active.stop_requested is None:  # the stop has reached the run
                await asyncio.sleep(0.01)
        held.release.set()
        result = await service.wait(record.id)
        await stopping
        assert result is not None and result.termination_reason is TerminationReason.COMPLETED
        assert await _log_agrees_with_record(components, record.id) is ConversationStatus.FINISHED
