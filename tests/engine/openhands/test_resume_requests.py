"""The first model request after a resume, captured at the scripted upstream (real SDK runtime).

A host running an OpenHands conversation is SIGKILLed mid-action or at a confirmation; the
store reconciles; the resumed run's first request must tell the model what happened to the
action in flight (paired with its call), never replay what the model already had, and keep
every tool call directly followed by its result.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from synthorg.domain import ConfirmationPolicy, TerminationReason
from synthorg.gateway.wire import ChatMessage
from synthorg.store.reconcile import reconcile

from ..chat_checks import answer_to_last_call, assert_valid_chat, text_of
from . import resume_scripts
from .conftest import Booter

# Two SDK start-ups (the killed host, the resumed run) per test: minutes on a loaded machine.
pytestmark = [pytest.mark.bwrap, pytest.mark.openhands, pytest.mark.slow, pytest.mark.timeout(900)]
SCRIPTS = "tests.engine.openhands.resume_scripts"
TASK = "Fix the failing test."


async def _host_until(
    home: Path, repo: Path, script: str, policy: ConfirmationPolicy, kinds: list[str], log: Path
) -> tuple[subprocess.Popen[str], str]:
    """A host running ``script``, read until every kind of ``kinds`` was seen in order."""
    driver = Path(__file__).with_name("host_driver.py")
    with log.open("w") as stderr:
        host = subprocess.Popen(
            [sys.executable, str(driver), str(home), str(repo), script, policy.value],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert host.stdout is not None
    cid = json.loads(await asyncio.to_thread(host.stdout.readline))["conversation_id"]
    wanted = list(kinds)

    async def read() -> None:
        assert host.stdout is not None
        while wanted:
            line = await asyncio.to_thread(host.stdout.readline)
            assert line, f"the host ended early; see {log}"
            if json.loads(line)["kind"] == wanted[0]:
                wanted.pop(0)

    await asyncio.wait_for(read(), 240)
    return host, cid


def _kill(host: subprocess.Popen[str]) -> None:
    os.kill(host.pid, signal.SIGKILL)
    host.wait(30)
    assert host.stdout is not None
    host.stdout.close()


async def _resume(
    booted: Booter, script: str, cid: str, message: str | None = None
) -> list[ChatMessage]:
    """Reconcile and resume in this process (no stall here); the first request's messages."""
    resume_scripts.REQUESTS.clear()
    resume_scripts.STALL = False
    async with booted(script) as components:
        await reconcile(components.store)
        result = await components.service.run(cid, message=message)
    assert result.termination_reason is TerminationReason.COMPLETED, result.error
    first = resume_scripts.REQUESTS[0]
    assert_valid_chat(first)
    assert "effect is unknown" in answer_to_last_call(first)
    users = [text_of(m) for m in first if m.role == "user"]
    assert sum(TASK in text for text in users) == 1  # the task is never replayed
    return first


async def test_killed_mid_action_the_model_hears_the_effect_is_unknown(
    booted: Booter, demo_repo: Path, home: Path, tmp_path: Path
) -> None:
    script = f"{SCRIPTS}:stall_at_three"
    host, cid = await _host_until(
        home,
        demo_repo,
        script,
        ConfirmationPolicy.NEVER,
        ["action", "observation", "action", "observation", "action"],
        tmp_path / "host.stderr",
    )
    try:
        worktree = home / "worktrees" / cid

        async def stalled() -> None:  # the third command appended its line and now sleeps
            while not any(len(p.read_text().split()) >= 3 for p in worktree.rglob("progress.txt")):
                await asyncio.sleep(0.05)

        await asyncio.wait_for(stalled(), 120)
    finally:
        _kill(host)
    await _resume(booted, script, cid)


async def test_killed_at_a_confirmation_no_message_lands_between_call_and_result(
    booted: Booter, demo_repo: Path, home: Path, tmp_path: Path
) -> None:
    script = f"{SCRIPTS}:risky_once"
    host, cid = await _host_until(
        home,
        demo_repo,
        script,
        ConfirmationPolicy.RISKY,
        ["confirmation_request"],
        tmp_path / "host.stderr",
    )
    _kill(host)
    first = await _resume(booted, script, cid, message="carry on, carefully")
    users = [text_of(m) for m in first if m.role == "user"]
    assert sum("carry on, carefully" in text for text in users) == 1
    assert "carry on, carefully" in text_of(first[-1])  # after the answered call, not before
