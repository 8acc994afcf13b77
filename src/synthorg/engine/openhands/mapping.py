"""Pure mapping of runtime records to SynthOrg domain events, and the run's running cost.

The runtime reports a running accumulated cost on every line and per-turn token deltas on
each turn; ``RunCosts`` turns them into the run-relative running ``TokenUsage`` that the
``TurnLedger`` closes turns at, so per-turn deltas sum exactly to the run total. A resumed
runtime starts from its persisted cost: the first ``status`` line is the run's baseline.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from synthorg.domain import (
    ActionEvent,
    ConversationEvent,
    ErrorEvent,
    MessageEvent,
    ObservationEvent,
    PendingAction,
    RiskLevel,
    TokenUsage,
)
from synthorg.engine.openhands.events import OpenHandsEvent, PendingWire, RuntimeNotice

_EXIT_CODE = re.compile(r"exit code (-?\d+)")
_RISKS = {"low": RiskLevel.LOW, "medium": RiskLevel.MEDIUM, "high": RiskLevel.HIGH}


def risk_of(value: str | None) -> RiskLevel:
    """The SDK's LOW/MEDIUM/HIGH/UNKNOWN as a RiskLevel (anything else is UNKNOWN)."""
    return _RISKS.get((value or "").lower(), RiskLevel.UNKNOWN)


def _cost(value: float) -> Decimal:
    # repr() is the shortest string that round-trips: no binary-float noise in the ledger.
    return Decimal(repr(value))


class RunCosts:
    """The run's running usage, relative to the cost the runtime had when it (re)started."""

    def __init__(self) -> None:
        self._baseline: Decimal | None = None
        self._latest = Decimal(0)
        self._tokens_in = 0
        self._tokens_out = 0

    def observe(self, record: OpenHandsEvent | RuntimeNotice) -> None:
        """Take the record's running cost (the first status line sets the baseline)."""
        cost = record.accumulated_cost
        if cost is None:
            return
        if self._baseline is None:
            # Records before the runtime's first status line come from before its cost
            # meter was attached; the status line carries the persisted total.
            if isinstance(record, RuntimeNotice) and record.kind == "status":
                self._baseline = _cost(cost)
                self._latest = self._baseline
            return
        self._latest = max(self._latest, _cost(cost))

    def add_tokens(self, event: OpenHandsEvent) -> None:
        """Count a turn's token deltas."""
        self._tokens_in += event.prompt_tokens or 0
        self._tokens_out += event.completion_tokens or 0

    def accumulated(self) -> TokenUsage:
        """Run-relative running usage."""
        baseline = self._baseline if self._baseline is not None else Decimal(0)
        return TokenUsage(
            tokens_in=self._tokens_in,
            tokens_out=self._tokens_out,
            cost_usd=max(Decimal(0), self._latest - baseline),
        )


class EventMapper:
    """Runtime records to domain events, remembering actions so observations can be matched."""

    def __init__(self) -> None:
        self._tools: dict[str, str] = {}
        self._arguments: dict[str, dict[str, Any]] = {}
        self._by_call: dict[str, str] = {}
        self._echoes: list[str] = []

    def expect_echo(self, text: str) -> None:
        """A user message we sent (already in the log): don't log the runtime's echo of it."""
        self._echoes.append(text)

    def action(self, event: OpenHandsEvent, usage: TokenUsage | None) -> ActionEvent:
        """The domain action; ``usage`` is its turn's figures (None on a parallel call)."""
        assert event.event_id is not None and event.tool_name is not None
        self._tools[event.event_id] = event.tool_name
        self._arguments[event.event_id] = event.arguments
        if event.tool_call_id:
            self._by_call[event.tool_call_id] = event.event_id
        return ActionEvent(
            action_id=event.event_id,
            tool_name=event.tool_name,
            arguments=event.arguments,
            summary=event.summary,
            thought=event.thought,
            risk=risk_of(event.risk),
            usage=usage,
        )

    def message(self, event: OpenHandsEvent, usage: TokenUsage | None) -> MessageEvent | None:
        """The domain message, or None for the echo of a message already logged."""
        if event.source == "agent":
            return MessageEvent(role="assistant", text=event.text, usage=usage)
        if event.text in self._echoes:
            self._echoes.remove(event.text)
            return None
        return MessageEvent(role="user" if event.source == "user" else "system", text=event.text)

    def observation(self, event: OpenHandsEvent) -> ConversationEvent:
        """The observation of a known action (an ErrorEvent when it matches none)."""
        action_id = event.action_id or self._by_call.get(event.tool_call_id or "")
        if action_id is None:
            return ErrorEvent(message=event.text or "agent error", code="agent_error")
        exit_code = None
        if self._tools.get(action_id) == "terminal":
            found = _EXIT_CODE.findall(event.text)
            exit_code = int(found[-1]) if found else None
        return ObservationEvent(
            action_id=action_id,
            content=event.text,
            is_error=event.is_error or event.rejected,
            exit_code=exit_code,
        )

    def tool_of(self, action_id: str) -> str:
        """The tool a known action called."""
        return self._tools.get(action_id, "")

    def arguments_of(self, action_id: str) -> dict[str, Any]:
        """The complete arguments of a known action (what its approver must see)."""
        return self._arguments.get(action_id, {})


def pending_actions(
    pending: tuple[PendingWire, ...], mapper: EventMapper
) -> tuple[PendingAction, ...]:
    """The domain view of the actions a confirmation request holds back."""
    return tuple(
        PendingAction(
            action_id=p.action_id,
            tool_name=p.tool_name or mapper.tool_of(p.action_id) or "unknown",
            summary=p.summary or "",
            arguments=mapper.arguments_of(p.action_id),
            risk=risk_of(p.risk),
        )
        for p in pending
    )


def notice_error(notice: RuntimeNotice) -> ErrorEvent | None:
    """Refusals and garbage lines are reported, never fatal."""
    if notice.kind == "garbage":
        return ErrorEvent(
            message=f"unreadable line from the OpenHands runtime ({notice.summary}): {notice.text}",
            code="openhands_garbage_line",
        )
    if notice.kind in ("decision_refused", "control_refused"):
        return ErrorEvent(message=notice.text or notice.kind, code=f"openhands_{notice.kind}")
    return None
