"""Sandbox component: the SandboxStreamer protocol, the bwrap and local backends, the toolbox."""

from __future__ import annotations

from typing import TYPE_CHECKING

from synthorg.lazy import lazy_exports

if TYPE_CHECKING:
    from synthorg.sandbox.backends import BACKENDS, make_sandbox
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

_WHERE = {
    "BACKENDS": "backends",
    "make_sandbox": "backends",
    "render_boundary": "boundary",
    "BwrapSandbox": "bwrap",
    "SandboxIOError": "errors",
    "SandboxOptInError": "errors",
    "SandboxStartError": "errors",
    "SandboxUnavailableError": "errors",
    "ToolboxError": "errors",
    "LocalSandbox": "local",
    "BoundaryDeclaration": "protocol",
    "BoundaryRow": "protocol",
    "BoundaryStatus": "protocol",
    "ExitReason": "protocol",
    "ForwardedEndpoint": "protocol",
    "SandboxExit": "protocol",
    "SandboxLimits": "protocol",
    "SandboxProcess": "protocol",
    "SandboxRequest": "protocol",
    "SandboxStreamer": "protocol",
    "CommandResult": "toolbox_client",
    "EditResult": "toolbox_client",
    "ToolboxClient": "toolbox_client",
}

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

__getattr__ = lazy_exports(__name__, _WHERE)
