"""A stop that arrives while the runner marks the run RUNNING ends it as asked.

Found by a CI run of tests/forge/test_governance.py under load: the cancel's task.cancel()
landed inside the runner's first transition, which sat outside the runner's cancellation
handling, so ``wait`` raised CancelledError and the conversation was never closed. The
transition here is held until the cancel has reached the run's task, which makes that
timing certain instead of rare.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from synthorg.domain import ConversationStatus, TerminationReason
from synthorg.engine import runner
from synthorg.service.options import RunOptions

from .conftest import Booter, make_task


async def _until(condition: Any) -> None:
    while not condition():  # one loop turn per check: no timed sleep
        await asyncio.sleep(0)


async def test_a_cancel_during_the_start_transition_cancels_the_run(
    booted: Booter, demo_repo: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    real = runner.transition

    async def held(store: Any, cid: str, status: ConversationStatus, *a: Any, **k: Any) -> Any:
        if status is ConversationStatus.RUNNING:
            entered.set()
            await release.wait()
        return await real(store, cid, status, *a, **k)

    monkeypatch.setattr(runner, "transition", held)
    async with booted("demo_fix_script") as components:
        service = components.service
        record = await service.create(make_task(demo_repo), RunOptions(loop="react"))
        await service.start(record.id)
        await entered.wait()
        task = service._runs.task_of(record.id)
        assert task is not None
        cancelling = asyncio.create_task(service.cancel(record.id, by="test"))
        await _until(lambda: task.cancelling() > 0)
        release.set()
        result = await service.wait(record.id)
        await cancelling
        assert result is not None
        assert result.termination_reason is TerminationReason.CANCELLED
        final = await components.store.get_conversation(record.id)
        assert final.status is ConversationStatus.CANCELLED
