"""Checkers, the NO_OP predicate and per-turn cost deltas."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synthorg.domain import Task, TerminationReason, TokenUsage, TurnRecord
from synthorg.engine import RunCheckers, TurnLedger, budget_checker, flag_checker, is_no_op
from synthorg.engine.no_op import work_tool_calls


def _task(artifacts: bool) -> Task:
    return Task(id="t", project_id="p", prompt="x", repository=".", artifacts_expected=artifacts)


async def test_checkers_order_and_reasons() -> None:
    cancel, shutdown = asyncio.Event(), asyncio.Event()
    spent = TokenUsage(cost_usd=Decimal("0.5"))

    async def usage() -> TokenUsage:
        return spent

    checkers = RunCheckers(
        task_cancellation=flag_checker(cancel),
        shutdown=flag_checker(shutdown),
        budget=budget_checker(usage, Decimal("0.5")),
    )
    assert await checkers.stop_reason() is TerminationReason.BUDGET_EXHAUSTED
    shutdown.set()
    assert await checkers.stop_reason() is TerminationReason.SHUTDOWN
    cancel.set()
    assert await checkers.stop_reason() is TerminationReason.CANCELLED
    assert await RunCheckers(budget=budget_checker(usage, None)).stop_reason() is None
    assert await RunCheckers(budget=budget_checker(usage, Decimal(1))).stop_reason() is None


_WORK = (TurnRecord(turn_index=0, tool_names=("terminal",)),)
_THINK = (TurnRecord(turn_index=0, tool_names=("think", "finish")),)


@pytest.mark.parametrize(
    ("artifacts", "reason", "changed", "turns", "resumed", "no_op"),
    [
        # By content, whenever the worktree can be compared with its base: resumed or not,
        # whatever tools ran.
        (True, TerminationReason.COMPLETED, False, _WORK, False, True),
        (True, TerminationReason.COMPLETED, False, _WORK, True, True),
        (True, TerminationReason.COMPLETED, True, (), False, False),
        (True, TerminationReason.COMPLETED, True, _THINK, True, False),
        # Without a view of the content: work tool calls of a fresh run.
        (True, TerminationReason.COMPLETED, None, (), False, True),
        (True, TerminationReason.COMPLETED, None, _THINK, False, True),
        (True, TerminationReason.COMPLETED, None, _WORK, False, False),
        (True, TerminationReason.COMPLETED, None, (), True, False),
        # Only a completed run of a task that expected artifacts can be NO_OP.
        (False, TerminationReason.COMPLETED, False, (), False, False),
        (True, TerminationReason.CANCELLED, False, (), False, False),
    ],
)
def test_no_op_predicate(
    artifacts: bool,
    reason: TerminationReason,
    changed: bool | None,
    turns: tuple[TurnRecord, ...],
    resumed: bool,
    no_op: bool,
) -> None:
    assert (
        is_no_op(_task(artifacts), reason, changed=changed, turns=turns, resumed=resumed) is no_op
    )


@given(
    st.integers(min_value=0, max_value=10**6),
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=10**5),
            st.integers(min_value=0, max_value=10**5),
            st.decimals(min_value=0, max_value=10, places=6, allow_nan=False),
        ),
        max_size=30,
    ),
)
def test_turn_deltas_sum_to_run_total(
    baseline_in: int, steps: list[tuple[int, int, Decimal]]
) -> None:
    baseline = TokenUsage(tokens_in=baseline_in, cost_usd=Decimal("1.25"))
    ledger = TurnLedger(baseline)
    running = baseline
    for tokens_in, tokens_out, cost in steps:
        running = running + TokenUsage(tokens_in=tokens_in, tokens_out=tokens_out, cost_usd=cost)
        ledger.record(running, ["terminal"])
    total = ledger.total(running)
    assert sum((t.cost_usd for t in ledger.turns), Decimal(0)) == total.cost_usd
    assert sum(t.tokens_in for t in ledger.turns) == total.tokens_in
    assert sum(t.tokens_out for t in ledger.turns) == total.tokens_out
    assert sum(len(t.tool_names) for t in ledger.turns) == len(steps)


def test_only_control_tools_do_not_count_as_work() -> None:
    ledger = TurnLedger(TokenUsage())
    ledger.record(TokenUsage(tokens_in=1), ["think"])
    ledger.record(TokenUsage(tokens_in=2), ["finish"])
    assert work_tool_calls(ledger.turns) == 0
    ledger.record(TokenUsage(tokens_in=3), ["terminal", "finish"])
    assert work_tool_calls(ledger.turns) == 1


def test_tool_and_audit_errors_are_under_the_root() -> None:
    from synthorg.engine.native.tools.base import ToolArgumentError
    from synthorg.errors import SynthOrgError
    from synthorg.mcp.audit import AuditWriteError

    assert issubclass(ToolArgumentError, SynthOrgError)
    assert issubclass(AuditWriteError, SynthOrgError)
