"""The real stack for server tests: boot() with the bwrap sandbox, the embedded gateway
serving a scripted model, the native loops, worktrees, the commit gate and LocalRunService."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from synthorg.service.boot import Components, boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.repositories import RepositoryPolicy
from synthorg.settings import Settings

SCRIPTS = ("progress3", "progress5", "slow50", "stuck", "done")


def stack_settings(
    home: Path, *, latency_ms: float = 0.0, extra: dict[str, Any] | None = None
) -> Settings:
    """Settings of a data dir whose gateway serves this module's scripts as models."""
    providers = [
        {
            "name": "scripted",
            "kind": "scripted",
            "models": list(SCRIPTS),
            "scripts": {name: f"real_scripts:{name}" for name in SCRIPTS},
            "latency_ms": latency_ms,
        }
    ]
    sections: dict[str, Any] = {
        "gateway": {"providers": providers, "prices": {}},
        "run": {"model": "progress3", "shutdown_grace_s": 1.0},
        "sandbox": {"backend": "bwrap"},
        "store": {"url": str(home / "store.db")},
        **(extra or {}),
    }
    return Settings(home=home, sections=sections)


@contextlib.asynccontextmanager
async def real_stack(
    settings: Settings, *, repositories: RepositoryPolicy | None = None
) -> AsyncIterator[Components]:
    """The wired components of one SynthOrg process."""
    async with boot(
        settings,
        registry=default_registry(),
        provisioner=default_provisioner,
        repositories=repositories,
    ) as components:
        yield components
