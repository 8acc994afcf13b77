"""The forge intake and its background processor, wired for one server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from synthorg.forge.config import ForgeSettings
from synthorg.forge.intake import WebhookIntake
from synthorg.forge.links import ForgeLinks, ForgeSite, forge_sites
from synthorg.forge.processor import DeliveryProcessor
from synthorg.forge.stages import ForgeStages
from synthorg.mcp.config import McpConfig
from synthorg.mcp.redact import Redactor
from synthorg.mcp.vault import CredentialVault
from synthorg.service.protocol import RunService
from synthorg.store.protocol import Store


@dataclass(frozen=True, slots=True)
class ForgeHub:
    """What ``synthorg serve`` runs for forge webhooks."""

    intake: WebhookIntake
    processor: DeliveryProcessor
    links: ForgeLinks

    @classmethod
    def build(
        cls,
        settings: ForgeSettings,
        env: Mapping[str, str],
        store: Store,
        service: RunService,
        *,
        stages: Mapping[str, ForgeStages] | None = None,
        sites: Mapping[str, ForgeSite] | None = None,
        poll_s: float = 2.0,
    ) -> ForgeHub:
        """The hub; a project whose secret is not in ``env`` is a ConfigError. ``stages``
        publishes a project's landed runs (projects without one only run); ``sites`` are the
        forge pages the console may link (a project without one shows its links as text)."""
        processor = DeliveryProcessor(settings, store, service, stages=stages, poll_s=poll_s)
        intake = WebhookIntake.from_env(settings, env, store)
        intake.wake = processor.wake
        return cls(intake=intake, processor=processor, links=ForgeLinks(store, sites or {}))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The processor in the background while the server serves (queued work first)."""
        task = asyncio.create_task(self.processor.run_forever(), name="forge-processor")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def project_stages(
    settings: ForgeSettings, mcp: McpConfig, env: Mapping[str, str]
) -> dict[str, ForgeStages]:
    """The stages of every forge project that ``[mcp]`` gives a forge (its token, remote)."""
    vault = CredentialVault.from_config(mcp, env)
    redactor = Redactor(vault.secret_values())
    return {
        p.project_id: ForgeStages(p, vault, redactor)
        for p in mcp.projects
        if p.project_id in settings.projects and p.forge is not None
    }


def project_sites(settings: ForgeSettings, mcp: McpConfig) -> dict[str, ForgeSite]:
    """The forge web sites of the forge projects that ``[mcp]`` gives a forge."""
    return forge_sites(
        {
            p.project_id: p.forge
            for p in mcp.projects
            if p.project_id in settings.projects and p.forge is not None
        }
    )
