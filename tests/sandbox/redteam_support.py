"""What the red-team tests share: the real stack booted with a plan-following scripted model,
a conversation whose task carries a plan token, and the host marker directory's check."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from synthorg.domain import ConversationRecord, Task, new_id
from synthorg.service.boot import Components, boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.service.options import RunOptions
from tests.support import scripted_settings


@asynccontextmanager
async def booted(home: Path, script: str, model: str) -> AsyncIterator[Components]:
    """The real stack over ``home`` whose model ``model`` is the scripted ``script``."""
    settings = scripted_settings(home, script, model=model)
    async with boot(
        settings, registry=default_registry(), provisioner=default_provisioner
    ) as components:
        yield components


async def create_planned(
    components: Components, repo: Path, prompt: str, **options: object
) -> tuple[ConversationRecord, str]:
    """A react conversation on ``repo`` whose prompt carries a new plan token; both."""
    token = secrets.token_hex(8)
    task = Task(
        id=new_id("task"),
        project_id="proj",
        prompt=f"{prompt} PLAN:{token}",
        repository=str(repo),
    )
    record = await components.service.create(task, RunOptions(loop="react", **options))
    return record, token


def ran_on_host(marker: Path) -> list[str]:
    """What the attack's programs touched in the host marker dir (empty: nothing ran)."""
    return sorted(p.name for p in marker.iterdir())
