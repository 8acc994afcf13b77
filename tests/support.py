"""Helpers shared by the suites that boot the real service around a scripted model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from synthorg.domain import Task, new_id
from synthorg.settings import Settings


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
