"""Errors of the native loops: model calls that failed at the gateway boundary."""

from __future__ import annotations

from synthorg.errors import BoundaryError


class ModelCallError(BoundaryError):
    """A model call through the gateway failed; ``status`` is the HTTP status, if any."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class ModelBudgetExhausted(ModelCallError):
    """The gateway refused the call with 402: the run's cost ceiling was reached (run killed)."""
