"""Structured (JSON) access log: one line per chat request on logger ``synthorg.gateway.access``."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from synthorg.gateway.ticket import Ticket

ACCESS_LOGGER = logging.getLogger("synthorg.gateway.access")


def log_request(ticket: Ticket, status: int, latency_s: float, *, stream: bool) -> None:
    """Log execution id, model, tokens, cost and latency of one answered request."""
    if not ACCESS_LOGGER.isEnabledFor(logging.INFO):
        return
    usage = ticket.usage
    record = {
        "event": "gateway.request",
        "execution_id": ticket.claims.execution_id,
        "conversation_id": ticket.claims.conversation_id,
        "provider": ticket.claims.provider,
        "model": ticket.model,
        "status": status,
        "stream": stream,
        "tokens_in": usage.prompt_tokens if usage else 0,
        "tokens_out": usage.completion_tokens if usage else 0,
        "cost_usd": str(ticket.cost),
        "latency_ms": round(latency_s * 1000, 3),
        "killed": ticket.killed,
    }
    # Made and handled directly: ``info`` would walk the stack for the caller of a line
    # whose source is always this one (a sixth of the log's cost per request).
    line = ACCESS_LOGGER.makeRecord(
        ACCESS_LOGGER.name, logging.INFO, __file__, 0, json.dumps(record), (), None
    )
    ACCESS_LOGGER.handle(line)
