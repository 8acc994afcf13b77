"""Resume after the process running the loop was SIGKILLed mid-run."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from synthorg.domain import ConversationStatus, ObservationEvent, TerminationReason
from synthorg.engine.native.scripts import progress_script

from .harness import harness

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]
TOTAL = 8


async def test_resume_after_sigkill_continues_from_the_log(tmp_path: Path) -> None:
    driver = Path(__file__).with_name("kill_driver.py")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(driver),
        str(tmp_path),
        str(TOTAL),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    cid = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip()
    async with harness(tmp_path) as h:
        for _ in range(3000):
            events = await h.events(cid)
            done = [
                e
                for e in events
                if isinstance(e.event, ObservationEvent) and "confirmed-" in e.event.content
            ]
            if len(done) >= 3:
                break
            await asyncio.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
        killed_at = len(done)
        assert killed_at < TOTAL
        assert (await h.store.get_conversation(cid)).status is ConversationStatus.RUNNING

        await h.store.reconcile_after_restart()
        record = await h.store.get_conversation(cid)
        assert record.status.is_resumable
        prior = tuple(await h.events(cid))
        run = await h.new_run(
            progress_script(TOTAL), conversation_id=cid, prior=prior, max_turns=100
        )
        async with h.toolbox(cid) as toolbox:
            result = await h.execute(run, toolbox)

        assert result.termination_reason is TerminationReason.COMPLETED, result.error
        assert result.resumed
        numbers = [int(n) for n in (h.repo / "progress.txt").read_text().split()]
        # Every number is written; at most the one in flight at the kill is written twice.
        assert sorted(set(numbers)) == list(range(1, TOTAL + 1))
        assert numbers == sorted(numbers) and len(numbers) - TOTAL <= 1
        # The resumed run did only the remaining work: no number before the kill is redone.
        assert len(result.turns) <= TOTAL - killed_at + 2
        record = await h.store.get_conversation(cid)
        assert record.status is ConversationStatus.FINISHED and record.runs == 2
