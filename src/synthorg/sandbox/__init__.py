"""Sandbox component: the SandboxStreamer protocol, the bwrap and local backends, the toolbox."""

from __future__ import annotations

from pathlib import Path

from synthorg.errors import UsageError
from synthorg.sandbox.boundary import render_boundary
from synthorg.sandbox.bwrap import BwrapSandbox
from synthorg.sandbox.errors import (
    SandboxIOError,
    SandboxOptInError,
    SandboxStartError,
    SandboxUnavailableError,
    ToolboxError,
)
from synthorg.sandbox.local import LocalSandbox
from synthorg.sandbox.protocol import (
    BoundaryDeclaration,
    BoundaryRow,
    BoundaryStatus,
    ExitReason,
    ForwardedEndpoint,
    SandboxExit,
    SandboxLimits,
    SandboxProcess,
    SandboxRequest,
    SandboxStreamer,
)
from synthorg.sandbox.toolbox_client import CommandResult, EditResult, ToolboxClient

BACKENDS = frozenset({"bwrap", "local"})


def make_sandbox(
    backend: str, *, allow_local: bool = False, owner: Path | None = None
) -> SandboxStreamer:
    """Build a backend by name; unknown names and local without opt-in fail loud. ``owner``:
    the data dir whose dead runs' quotas it settles (default ``SYNTHORG_HOME``)."""
    if backend == "bwrap":
        return BwrapSandbox(owner=owner)
    if backend == "local":
        return LocalSandbox(allow_unisolated=allow_local)
    raise UsageError(
        f"unknown sandbox backend {backend!r}: choose one of {', '.join(sorted(BACKENDS))}"
    )


__all__ = [
    "BACKENDS",
    "BoundaryDeclaration",
    "BoundaryRow",
    "BoundaryStatus",
    "BwrapSandbox",
    "CommandResult",
    "EditResult",
    "ExitReason",
    "ForwardedEndpoint",
    "LocalSandbox",
    "SandboxExit",
    "SandboxIOError",
    "SandboxLimits",
    "SandboxOptInError",
    "SandboxProcess",
    "SandboxRequest",
    "SandboxStartError",
    "SandboxStreamer",
    "SandboxUnavailableError",
    "ToolboxClient",
    "ToolboxError",
    "make_sandbox",
    "render_boundary",
]
