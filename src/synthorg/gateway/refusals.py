"""What the gateway refuses, and the checks that refuse: one place for each refusal's rule."""

from __future__ import annotations

from decimal import Decimal

from synthorg.domain.money import ZERO, fits, reached, room_left
from synthorg.errors import SynthOrgError
from synthorg.gateway.estimate import Bounds
from synthorg.gateway.liveness import run_closed
from synthorg.gateway.wire import REQUEST_EXCEEDS_BUDGET
from synthorg.store.protocol import ExecutionUsage


class GatewayRefusal(SynthOrgError):
    """A request the gateway refuses; carries the HTTP status and OpenAI error type/code."""

    def __init__(self, status: int, message: str, type_: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code


def unauthorized(message: str) -> GatewayRefusal:
    return GatewayRefusal(401, message, "authentication_error", "invalid_bearer")


def forbidden(message: str, code: str) -> GatewayRefusal:
    return GatewayRefusal(403, message, "permission_error", code)


def tree_closed(root_id: str, ceiling: Decimal, spent: Decimal) -> GatewayRefusal | None:
    """Why a delegation tree admits no more requests; None while it does."""
    if not reached(ceiling, spent):
        return None
    return GatewayRefusal(
        402,
        f"the delegation tree of conversation {root_id!r} reached its cost ceiling of "
        f"${ceiling} (spent ${spent:.6f} by it and the runs it delegated)",
        "insufficient_quota",
        "cost_ceiling_reached",
    )


def tree_killed(root_id: str, reason: str) -> GatewayRefusal:
    """The refusal of every run of a delegation tree that was killed."""
    return GatewayRefusal(
        403,
        f"the delegation tree of conversation {root_id!r} was killed ({reason})",
        "permission_error",
        "execution_killed",
    )


def check_run_open(row: ExecutionUsage, spent: Decimal) -> None:
    """Refuse a run that is finished, killed or at its ceiling."""
    closed = run_closed(row, spent=spent)  # the rule shared with the MCP server
    if closed is not None:
        type_ = "insufficient_quota" if closed.status == 402 else "permission_error"
        raise GatewayRefusal(closed.status, closed.message, type_, closed.code)


def check_fits(name: str, limits: Bounds, ceiling: Decimal, spent: Decimal) -> None:
    """Refuse a request whose least cost exceeds what is left of ``name``'s ceiling."""
    left = room_left(ceiling, spent)
    if not fits(ceiling, spent, ZERO, limits.least):
        raise GatewayRefusal(
            402,
            f"{name}: this request costs at least ${limits.least:.6f} ({limits.prompt_min} "
            f"prompt tokens), more than the ${left:.6f} left of its cost ceiling of ${ceiling} "
            f"(spent ${spent:.6f}); send a shorter request",
            "insufficient_quota",
            REQUEST_EXCEEDS_BUDGET,
        )
