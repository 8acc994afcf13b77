"""Building a run's result: per-turn cost deltas, the NO_OP rule, the termination log line."""

from __future__ import annotations

from collections.abc import Sequence

from synthorg.domain import ExecutionResult, TerminationReason, TokenUsage, TurnRecord
from synthorg.engine.no_op import CONTROL_TOOLS, is_no_op
from synthorg.engine.protocol import LoopContext
from synthorg.logging import get_logger

_log = get_logger("synthorg.engine")

EXECUTION_LOOP_TERMINATED = "EXECUTION_LOOP_TERMINATED"


class TurnLedger:
    """Turn records whose cost deltas sum exactly to the run total.

    Each turn's figures are the difference between the running accumulated usage (from the
    gateway's ledger, or reported by a runtime) after the turn and before it.
    """

    def __init__(self, baseline: TokenUsage) -> None:
        self._baseline = baseline
        self._last = baseline
        self._turns: list[TurnRecord] = []

    def record(self, accumulated: TokenUsage, tool_names: Sequence[str]) -> TurnRecord:
        """Close a turn at ``accumulated``; the delta since the previous turn is its cost."""
        delta = accumulated.minus(self._last)
        self._last = accumulated
        turn = TurnRecord(
            turn_index=len(self._turns),
            tool_names=tuple(tool_names),
            tokens_in=delta.tokens_in,
            tokens_out=delta.tokens_out,
            cost_usd=delta.cost_usd,
        )
        self._turns.append(turn)
        return turn

    @property
    def turns(self) -> tuple[TurnRecord, ...]:
        """The turns so far."""
        return tuple(self._turns)

    @property
    def tool_calls(self) -> int:
        """Tool calls over all turns."""
        return sum(len(turn.tool_names) for turn in self._turns)

    @property
    def work_tool_calls(self) -> int:
        """Tool calls that act on the world (not finish/think/plan bookkeeping)."""
        return sum(
            1 for turn in self._turns for name in turn.tool_names if name not in CONTROL_TOOLS
        )

    def total(self, accumulated: TokenUsage) -> TokenUsage:
        """Run total at ``accumulated``: the sum of turn deltas plus calls after the last turn."""
        return accumulated.minus(self._baseline)


def finish_run(
    context: LoopContext,
    *,
    loop_type: str,
    reason: TerminationReason,
    ledger: TurnLedger,
    accumulated: TokenUsage,
    final_message: str = "",
    error: str | None = None,
) -> ExecutionResult:
    """The ExecutionResult of a run, NO_OP applied, with EXECUTION_LOOP_TERMINATED logged."""
    if reason is TerminationReason.COMPLETED and is_no_op(
        context.task, tool_calls=ledger.work_tool_calls, resumed=context.resumed
    ):
        reason = TerminationReason.NO_OP
        error = error or "the task expected changes but the agent made no tool call"
    result = ExecutionResult(
        execution_id=context.execution_id,
        conversation_id=context.conversation_id,
        loop_type=loop_type,
        termination_reason=reason,
        turns=ledger.turns,
        usage=ledger.total(accumulated),
        final_message=final_message,
        error=error,
        resumed=context.resumed,
        tool_calls=ledger.tool_calls,
        branch=context.workspace.branch,
    )
    log_termination(result)
    return result


def log_termination(result: ExecutionResult) -> None:
    """The one log line every terminal transition writes."""
    _log.info(
        EXECUTION_LOOP_TERMINATED,
        execution_id=result.execution_id,
        conversation_id=result.conversation_id,
        loop_type=result.loop_type,
        termination_reason=result.termination_reason.value,
        turns=len(result.turns),
        tool_calls=result.tool_calls,
        tokens_in=result.usage.tokens_in,
        tokens_out=result.usage.tokens_out,
        cost_usd=str(result.usage.cost_usd),
        error=result.error,
    )
