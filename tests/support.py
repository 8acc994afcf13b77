"""Helpers shared by the suites that boot the real service around a scripted model."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from synthorg.domain import Task, new_id
from synthorg.service.boot import Components, boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.settings import Settings

IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.test",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.test",
}
"""The git identity every test commit is made with."""


def hermetic_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No global or system git config, and an identity from the environment (CI may have none)."""
    empty = tmp_path_factory.mktemp("gitconfig") / "empty"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for key, value in IDENTITY.items():
        monkeypatch.setenv(key, value)


def boot_real(settings: Settings) -> AbstractAsyncContextManager[Components]:
    """The service as ``synthorg run`` and ``serve`` wire it (every loop, the real
    provisioner), over ``settings``."""
    return boot(settings, registry=default_registry(), provisioner=default_provisioner)


def scripted_settings(
    home: Path, script: str, *, model: str, latency_ms: float = 0.0, **sections: dict[str, Any]
) -> Settings:
    """Settings whose gateway serves ``model`` with the scripted ``script`` ('module:attr')."""
    return Settings(
        home=home,
        sections={
            "gateway": {
                "providers": [
                    {
                        "name": "scripted",
                        "kind": "scripted",
                        "models": [model],
                        "script": script,
                        "latency_ms": latency_ms,
                    }
                ],
                "prices": {model: {"input_per_mtok_usd": 3, "output_per_mtok_usd": 15}},
            },
            "run": {"model": model, "shutdown_grace_s": 0.5},
            **sections,
        },
    )


def make_task(repo: Path, prompt: str, **fields: Any) -> Task:
    """A task of project ``proj`` on ``repo``."""
    return Task(id=new_id("task"), project_id="proj", prompt=prompt, repository=str(repo), **fields)


def terminations_logged(stderr: str, conversation_id: str) -> list[dict[str, Any]]:
    """The EXECUTION_LOOP_TERMINATED log lines (JSON on stderr) written for a conversation."""
    lines = (json.loads(line) for line in stderr.splitlines() if line.startswith("{"))
    return [
        line
        for line in lines
        if line.get("event") == "EXECUTION_LOOP_TERMINATED"
        and line.get("conversation_id") == conversation_id
    ]


def free_port() -> int:
    """A free loopback port (bound once and released: a test's server takes it next)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def until_ready(url: str, exited: Callable[[], str | None], timeout_s: float) -> bool:
    """Poll ``url``/ready until it answers 200 (True) or ``timeout_s`` passes (False).

    ``exited`` returns None while the server runs, else what it printed: the poll then fails
    at once with that output instead of waiting out the timeout.
    """
    async with httpx.AsyncClient(base_url=url) as client:
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    output = exited()
                    assert output is None, f"server exited: {output}"
                    try:
                        if (await client.get("/ready")).status_code == 200:
                            return True
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(0.05)
        except TimeoutError:
            return False
