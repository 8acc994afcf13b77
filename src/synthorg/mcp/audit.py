"""Auditing: every tool call becomes events in the calling conversation and log lines.

A call that acts is recorded twice: its intent ('started', written durably before anything is
done; the call is refused if it cannot be written) and its outcome.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from synthorg.domain import ConversationRecord, ToolAuditEvent
from synthorg.errors import BoundaryError
from synthorg.logging import get_logger
from synthorg.store.protocol import ExecutionUsage

Outcome = Literal["started", "ok", "refused", "error", "unknown"]

_log = get_logger("synthorg.mcp")


class AuditSink(Protocol):
    """Where audit events go; ``ConversationStore.append`` satisfies it structurally."""

    async def append(self, conversation_id: str, event: ToolAuditEvent, /) -> object:
        """Append ``event`` durably to the conversation's event log."""
        ...


class McpStore(AuditSink, Protocol):
    """What the MCP server reads and writes: the audit log, conversations, the run ledger.

    The store (SQLite or PostgreSQL) satisfies it structurally; it is the one the gateway
    meters into, so a run the gateway finished or killed is seen here too.
    """

    @property
    def ledger_id(self) -> str:
        """The store's own id: a bearer acts only at the ledger that opened its run."""
        ...

    async def get_conversation(self, conversation_id: str) -> ConversationRecord:
        """The conversation; NotFoundError if unknown."""
        ...

    async def get_execution(self, execution_id: str) -> ExecutionUsage:
        """The execution's ledger row; NotFoundError if unknown."""
        ...


class AuditWriteError(BoundaryError):
    """The audit event could not be written (the call's effect may still have happened)."""


async def record_call(
    sink: AuditSink,
    *,
    conversation_id: str,
    project_id: str,
    execution_id: str,
    tool: str,
    arguments: dict[str, Any],
    outcome: Outcome,
    detail: str,
    duration_ms: float,
) -> None:
    """Append the (already redacted) audit event and emit the structured log line."""
    event = ToolAuditEvent(
        tool=tool,
        arguments=arguments,
        outcome=outcome,
        detail=detail,
        duration_ms=max(duration_ms, 0.0),
    )
    fields = {
        "tool": tool,
        "outcome": outcome,
        "conversation_id": conversation_id,
        "project_id": project_id,
        "execution_id": execution_id,
        "duration_ms": round(duration_ms, 3),
        "arguments": arguments,
        "detail": detail,
    }
    try:
        await sink.append(conversation_id, event)
    except Exception as exc:
        _log.error("mcp.tool_call.audit_failed", error=type(exc).__name__, **fields)
        raise AuditWriteError(f"audit event for {tool} could not be written") from exc
    _log.info("mcp.tool_call", **fields)
