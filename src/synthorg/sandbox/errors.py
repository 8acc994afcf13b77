"""Errors raised by the sandbox component."""

from __future__ import annotations

from synthorg.errors import BoundaryError, ConfigError, UsageError


class SandboxUnavailableError(ConfigError):
    """The chosen backend cannot run on this host (e.g. bubblewrap missing)."""


class SandboxOptInError(UsageError):
    """The unisolated local backend was requested without the explicit opt-in."""


class SandboxStartError(BoundaryError):
    """The sandbox failed to start (bwrap refused, cgroup setup failed, ...)."""


class SandboxIOError(BoundaryError):
    """Talking to the sandboxed process failed (its stdin closed, it died)."""


class ToolboxError(BoundaryError):
    """The in-sandbox toolbox did not answer as expected."""
