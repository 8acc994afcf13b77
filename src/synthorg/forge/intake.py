"""The webhook's answer: verify, classify, keep the delivery once, queue it; nothing waits on a run.

Everything here is bounded by one store write, so GitHub's 10 s deadline holds whatever the
runs do; the work happens in :class:`~synthorg.forge.processor.DeliveryProcessor`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from synthorg.errors import ConfigError
from synthorg.forge.config import ForgeSettings
from synthorg.forge.signature import BadDeliveryError, BadSignatureError, verified_event
from synthorg.forge.triggers import Refusal, classify
from synthorg.logging import get_logger
from synthorg.store.protocol import DeliveryRecord, DeliveryState, ForgeDeliveryStore

log = get_logger("synthorg.forge")


@dataclass(frozen=True, slots=True)
class Answer:
    """The HTTP answer to one delivery."""

    status: int
    body: dict[str, Any]


@dataclass
class WebhookIntake:
    """Accepts deliveries for the configured projects."""

    settings: ForgeSettings
    secrets: Mapping[str, str]  # project id -> webhook secret
    store: ForgeDeliveryStore
    wake: Callable[[], None] = field(default=lambda: None)  # the processor's doorbell

    @classmethod
    def from_env(
        cls, settings: ForgeSettings, env: Mapping[str, str], store: ForgeDeliveryStore
    ) -> WebhookIntake:
        """The intake with each project's secret read from its variable (the server's only)."""
        secrets: dict[str, str] = {}
        for project, config in settings.projects.items():
            secret = env.get(config.webhook_secret_env, "")
            if not secret:
                raise ConfigError(
                    f"[forge.projects.{project}] webhook_secret_env names "
                    f"{config.webhook_secret_env}, which is not set in the server's environment"
                )
            secrets[project] = secret
        return cls(settings=settings, secrets=secrets, store=store)

    async def receive(self, project: str, headers: Mapping[str, str], body: bytes) -> Answer:
        """The answer to one delivery; a delivery of interest is durably queued first."""
        config = self.settings.projects.get(project)
        if config is None:
            return Answer(404, {"detail": f"no forge webhook for project {project!r}"})
        try:
            event = verified_event(headers, body, self.secrets[project])
        except BadSignatureError as exc:
            log.warning("FORGE_BAD_SIGNATURE", project=project, detail=str(exc))
            return Answer(401, {"detail": str(exc)})
        except BadDeliveryError as exc:
            return Answer(400, {"detail": str(exc)})
        data: dict[str, Any] = event.data
        meaning = classify(config, event.event, data)
        name = f"{event.event}.{data['action']}" if data.get("action") else event.event
        if meaning is None:
            return Answer(202, {"delivery": event.delivery_id, "queued": False, "event": name})
        stamp = datetime.now(UTC)
        fresh = await self.store.record_delivery(
            DeliveryRecord(
                delivery_id=event.delivery_id,
                project_id=project,
                event=name,
                state=DeliveryState.QUEUED,
                issue=meaning.issue if isinstance(meaning.issue, int) else None,
                payload=data,
                received_at=stamp,
                updated_at=stamp,
            )
        )
        log.info(
            "FORGE_DELIVERY",
            project=project,
            delivery=event.delivery_id,
            kind=name,
            duplicate=not fresh,
            refusal=isinstance(meaning, Refusal),
        )
        if fresh:
            self.wake()
        return Answer(202, {"delivery": event.delivery_id, "queued": fresh, "duplicate": not fresh})
