"""Errors of the OpenHands loop: the loop itself, its runtime, and a runtime that is missing."""

from __future__ import annotations

from synthorg.errors import BoundaryError, ConfigError, SynthOrgError


class OpenHandsLoopError(SynthOrgError):
    """The OpenHands adapter was used wrongly or met a state it cannot handle."""


class OpenHandsRuntimeError(BoundaryError):
    """The in-sandbox OpenHands runtime misbehaved (bad stream, failed start, crash)."""


class OpenHandsUnavailableError(ConfigError):
    """The OpenHands runtime is not built on this host; the operator must build it."""
