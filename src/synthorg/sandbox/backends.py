"""The sandbox backends by name: bwrap (the default) and local (unisolated, opt-in)."""

from __future__ import annotations

from pathlib import Path

from synthorg.errors import UsageError
from synthorg.sandbox.bwrap import BwrapSandbox
from synthorg.sandbox.local import LocalSandbox
from synthorg.sandbox.protocol import SandboxStreamer

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
