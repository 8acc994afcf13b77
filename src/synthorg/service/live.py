"""Live control of the runs in progress in this process: steer, pause, interrupt, cancel,
hand over, decide; each said in the log before the run is told."""

from __future__ import annotations

import asyncio
import contextlib

from synthorg.domain import (
    CancelEvent,
    InterruptEvent,
    MessageEvent,
    PauseEvent,
    TerminationReason,
)
from synthorg.engine import Decision
from synthorg.logging import get_logger
from synthorg.service.active import ActiveRun, ActiveRuns
from synthorg.store.errors import LeaseLostError
from synthorg.store.fence import fenced
from synthorg.store.protocol import Store

_log = get_logger("synthorg.service")


class LiveControl:
    """Control commands for the active runs (``ActiveRuns``); ConflictError without one."""

    def __init__(self, store: Store, runs: ActiveRuns) -> None:
        self._store = store
        self._runs = runs

    def active_run(self, conversation_id: str) -> ActiveRun | None:
        """The run of this conversation in progress here (delegation cascades through it)."""
        return (
            None
            if not self._runs.is_active(conversation_id)
            else self._runs.require(conversation_id)
        )

    async def steer(self, conversation_id: str, text: str) -> None:
        """A message for the next turn of the active run."""
        active = self._runs.require(conversation_id)
        await self._store.append(conversation_id, MessageEvent(role="user", text=text))
        active.control.steer(text)

    async def pause(self, conversation_id: str, *, by: str) -> None:
        """Stop after the in-flight model call; resumable."""
        active = self._runs.require(conversation_id)
        await self._store.append(conversation_id, PauseEvent(requested_by=by))
        active.control.request_pause()

    async def interrupt(self, conversation_id: str, *, by: str) -> None:
        """Stop now; the conversation stays resumable (PAUSED)."""
        active = self._runs.require(conversation_id)
        await self._store.append(conversation_id, InterruptEvent(requested_by=by))
        await self.stop(active, TerminationReason.PAUSED)

    async def cancel(self, conversation_id: str, *, by: str) -> None:
        """Stop now; the conversation ends CANCELLED."""
        active = self._runs.require(conversation_id)
        _log.info("RUN_CANCEL_REQUESTED", conversation_id=conversation_id, by=by)
        await self._store.append(conversation_id, CancelEvent(requested_by=by))
        active.cancelled.set()
        await self.stop(active, TerminationReason.CANCELLED)

    async def hand_over(self, conversation_id: str) -> None:
        """Stop the run here without ending it (SHUTDOWN, as at a worker's stop): another
        process resumes it from the log. For a run an engine has moved elsewhere.

        Said in the log first, inside the run's fence: a process that no longer owns the run
        (a zombie) is refused there (LeaseLostError) and only stops its own run and sandbox;
        the successor's log and run go on undisturbed.
        """
        active = self._runs.require(conversation_id)
        try:
            with fenced(active.fence) if active.fence else contextlib.nullcontext():
                await self._store.append(
                    conversation_id,
                    MessageEvent(
                        role="system",
                        text="this worker stopped the run: the engine moved it to another "
                        "worker; it resumes there from this log",
                    ),
                )
        except LeaseLostError:
            _log.warning("RUN_HAND_OVER_FENCED", conversation_id=conversation_id)
        await self.stop(active, TerminationReason.SHUTDOWN)

    async def decide(self, conversation_id: str, decision: Decision) -> None:
        """Deliver a decision bound to pending action ids and the approver."""
        active = self._runs.require(conversation_id)
        # ConflictError for ids not pending; the loop records the decision event itself.
        active.control.decide(decision)

    async def stop(self, active: ActiveRun, reason: TerminationReason) -> None:
        """Stop ``active`` with ``reason`` and wait for its task to end."""
        active.stop_requested = reason
        if active.task is None or active.task.done():
            return
        if not active.closing:  # a closing run ends as its loop did; it is only waited for
            active.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({active.task})
