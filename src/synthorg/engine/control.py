"""Live run control: pause, steering messages and confirmation decisions for one run."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from synthorg.domain.events import decided_both
from synthorg.errors import ConflictError, UsageError


@dataclass(frozen=True)
class Decision:
    """A person's decision on pending actions, bound to their ids and to who decided."""

    accepted: frozenset[str]
    rejected: frozenset[str]
    approver: str
    reason: str = ""

    def __post_init__(self) -> None:
        both = decided_both(self.accepted, self.rejected)
        if both:
            raise UsageError(f"action ids both accepted and rejected: {both}")


class RunControl:
    """The channel between people (CLI, server) and a running loop.

    Loops read it at event boundaries: steering messages before the next model call, a pause
    after the in-flight call, decisions while waiting for confirmation.
    """

    def __init__(self) -> None:
        self._steering: asyncio.Queue[str] = asyncio.Queue()
        self._pause = asyncio.Event()
        self._pending: frozenset[str] = frozenset()
        self._decision: asyncio.Future[Decision] | None = None
        self.forwarders: list[asyncio.Queue[dict[str, object]]] = []

    # -- steering -------------------------------------------------------------------------
    def steer(self, text: str) -> None:
        """Queue a message for the agent's next turn (the caller has logged it already)."""
        self._steering.put_nowait(text)
        self._forward({"type": "message", "text": text})

    def drain_steering(self) -> list[str]:
        """All steering messages queued since the last call."""
        messages: list[str] = []
        while not self._steering.empty():
            messages.append(self._steering.get_nowait())
        return messages

    # -- pause ----------------------------------------------------------------------------
    def request_pause(self) -> None:
        """Stop after the in-flight model call; the conversation stays resumable."""
        self._pause.set()
        self._forward({"type": "pause"})

    @property
    def pause_requested(self) -> bool:
        """Whether a pause was requested."""
        return self._pause.is_set()

    # -- confirmation ---------------------------------------------------------------------
    @property
    def pending_actions(self) -> frozenset[str]:
        """Action ids waiting for a decision (empty when not waiting)."""
        return self._pending

    def expect_decision(self, action_ids: frozenset[str]) -> asyncio.Future[Decision]:
        """Mark ``action_ids`` pending now; the future resolves with the decision.

        Call it before announcing the request, so a person who answers at once is never
        told that nothing is pending.
        """
        if not action_ids:
            raise ValueError("expect_decision needs at least one action id")
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._pending = action_ids
        self._decision = future

        def clear(done: asyncio.Future[Decision]) -> None:
            if self._decision is done:
                self._pending = frozenset()
                self._decision = None

        future.add_done_callback(clear)
        return future

    async def wait_for_decision(self, action_ids: frozenset[str]) -> Decision:
        """Mark ``action_ids`` pending and block until a decision covering them arrives."""
        return await self.expect_decision(action_ids)

    def decide(self, decision: Decision) -> None:
        """Deliver a decision; ConflictError when it doesn't match what is pending."""
        named = decision.accepted | decision.rejected
        if not self._pending or self._decision is None:
            raise ConflictError("no actions are waiting for confirmation")
        unknown = named - self._pending
        if unknown:
            raise ConflictError(f"action ids not pending: {sorted(unknown)}")
        missing = self._pending - named
        if missing:
            raise ConflictError(
                f"decision must name every pending action; missing {sorted(missing)}"
            )
        self._decision.set_result(decision)
        self._forward(
            {
                "type": "confirm",
                "accept": sorted(decision.accepted),
                "reject": sorted(decision.rejected),
                "reason": decision.reason,
            }
        )

    # -- forwarding to out-of-process runtimes -------------------------------------------
    def _forward(self, command: dict[str, object]) -> None:
        for queue in self.forwarders:
            queue.put_nowait(command)
