"""How runs end: the typed stop (Terminated), per-turn cost deltas, the result and its log line."""

from __future__ import annotations

from collections.abc import Sequence

from synthorg.domain import ExecutionResult, TerminationReason, TokenUsage, TurnRecord
from synthorg.engine.protocol import LoopContext
from synthorg.logging import get_logger

_log = get_logger("synthorg.engine")

EXECUTION_LOOP_TERMINATED = "EXECUTION_LOOP_TERMINATED"


# Not under SynthOrgError: a stop is control flow, not a failure, and must never be caught by
# a handler meant for errors.
class Terminated(Exception):
    """The run must end now, for ``reason``; raised by the run's sink or by a loop.

    The runner's sink raises it at the event boundary where a checker (cancellation,
    shutdown, budget) or a pause request names a reason; loops raise it for their own ends
    (turn cap, stuck, model failure). Whoever catches it closes the run with that reason.
    """

    def __init__(self, reason: TerminationReason, message: str | None = None) -> None:
        super().__init__(message or f"the run stopped: {reason.value}")
        self.reason = reason
        self.message = message


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

    def total(self, accumulated: TokenUsage) -> TokenUsage:
        """Run total at ``accumulated``: the sum of turn deltas plus calls after the last turn."""
        return accumulated.minus(self._baseline)


def build_result(
    context: LoopContext,
    *,
    loop_type: str,
    reason: TerminationReason,
    turns: Sequence[TurnRecord],
    usage: TokenUsage,
    final_message: str = "",
    error: str | None = None,
) -> ExecutionResult:
    """The ExecutionResult of a run as its loop saw it (the runner's ``finish_run`` closes it)."""
    return ExecutionResult(
        execution_id=context.execution_id,
        conversation_id=context.conversation_id,
        loop_type=loop_type,
        termination_reason=reason,
        turns=tuple(turns),
        usage=usage,
        final_message=final_message,
        error=error,
        resumed=context.resumed,
        tool_calls=sum(len(turn.tool_names) for turn in turns),
        branch=context.workspace.branch,
    )


def ledger_result(
    context: LoopContext,
    ledger: TurnLedger,
    accumulated: TokenUsage,
    *,
    loop_type: str,
    reason: TerminationReason,
    final_message: str = "",
    error: str | None = None,
) -> ExecutionResult:
    """``build_result`` from a loop's ledger at the accumulated usage."""
    return build_result(
        context,
        loop_type=loop_type,
        reason=reason,
        turns=ledger.turns,
        usage=ledger.total(accumulated),
        final_message=final_message,
        error=error,
    )


def log_termination(result: ExecutionResult) -> None:
    """The one log line every terminal transition writes (from the runner's ``finish_run``)."""
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
