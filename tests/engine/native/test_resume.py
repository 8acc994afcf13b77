"""Resume after the process running the loop was SIGKILLed mid-run."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from synthorg.domain import (
    ConversationStatus,
    MessageEvent,
    ObservationEvent,
    StoredEvent,
    TerminationReason,
)
from synthorg.engine.native.scripts import progress_script
from synthorg.gateway.scripted import ScriptedModel
from synthorg.gateway.wire import ChatMessage

from ..chat_checks import answer_to_last_call, assert_valid_chat, text_of
from . import resume_scripts
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
        assert record.status is ConversationStatus.INTERRUPTED
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


async def _killed_at(
    tmp_path: Path, mode: str, reached: Callable[[list[StoredEvent]], bool]
) -> str:
    """Run the driver in ``mode`` until ``reached(events)``, SIGKILL it; the conversation id."""
    driver = Path(__file__).with_name("kill_driver.py")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(driver),
        str(tmp_path),
        "5",
        mode,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    cid = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
    async with harness(tmp_path) as h:

        async def wait() -> None:
            while not reached(await h.events(cid)):
                await asyncio.sleep(0.02)

        try:
            await asyncio.wait_for(wait(), 120)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
    return cid


def _kinds(events: list[StoredEvent]) -> list[str]:
    return [e.event.kind for e in events]


async def _resume(
    tmp_path: Path,
    cid: str,
    script: ScriptedModel,
    message: str | None = None,
    *,
    answer: str = "effect is unknown",
) -> list[ChatMessage]:
    """Reconcile, resume (with ``message`` logged first, as ``--resume --message`` does) to
    completion; the first request the model received."""
    async with harness(tmp_path) as h:
        await h.store.reconcile_after_restart()
        if message is not None:
            await h.store.append(cid, MessageEvent(role="user", text=message))
        resume_scripts.REQUESTS.clear()
        prior = tuple(await h.events(cid))
        run = await h.new_run(script, conversation_id=cid, prior=prior)
        async with h.toolbox(cid) as toolbox:
            result = await h.execute(run, toolbox)
    assert result.termination_reason is TerminationReason.COMPLETED, result.error
    first = resume_scripts.REQUESTS[0]
    assert_valid_chat(first)
    # A call that was running: its effect is unknown; one only awaiting approval never ran.
    assert answer in answer_to_last_call(first)
    users = [text_of(m) for m in first if m.role == "user"]
    assert sum("Fix the failing test" in text for text in users) == 1  # never replayed
    return first


async def test_killed_mid_action_the_first_request_says_the_effect_is_unknown(
    tmp_path: Path,
) -> None:
    def stalled(events: list[StoredEvent]) -> bool:
        progress = tmp_path / "repo" / "progress.txt"
        return (
            _kinds(events).count("action") == 3
            and progress.exists()
            and (len(progress.read_text().split()) == 3)
        )

    cid = await _killed_at(tmp_path, "stall", stalled)
    await _resume(tmp_path, cid, resume_scripts.stall_at_three(stall=False))


async def test_killed_at_a_confirmation_no_message_lands_between_call_and_result(
    tmp_path: Path,
) -> None:
    cid = await _killed_at(
        tmp_path, "confirm", lambda events: "confirmation_request" in _kinds(events)
    )
    first = await _resume(
        tmp_path,
        cid,
        resume_scripts.ask_then_finish,
        message="carry on, carefully",
        answer="it never ran",  # it was only awaiting approval (issue 15 item 6)
    )
    users = [text_of(m) for m in first if m.role == "user"]
    assert sum("carry on, carefully" in text for text in users) == 1
