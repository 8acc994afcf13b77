"""Errors of the credentialed-tool MCP server: refusals (out of scope) apart from failures."""

from __future__ import annotations

from synthorg.errors import BoundaryError, UsageError


class ToolRefusedError(UsageError):
    """A tool call is out of the run's scope or its arguments are invalid; nothing was done.

    The message is shown to the model and names what is allowed instead.
    """


class ToolFailedError(BoundaryError):
    """A tool call was in scope but the outside world failed it (git, the forge, the fetch)."""


class ToolOutcomeUnknownError(BoundaryError):
    """A tool call may or may not have had its effect, and that could not be found out.

    The message says what was tried; the call is audited as 'unknown', never as a plain error.
    """
