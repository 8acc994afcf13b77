"""Settings for end-to-end runs of the real service with the OpenHands loop (tests and host)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from synthorg.domain import Task, new_id
from synthorg.settings import Settings

SCRIPTS = "synthorg.engine.openhands.scripts"
MODEL = "scripted-oh"


def make_home(tmp: Path, runtime_venv: Path) -> Path:
    """A data dir whose runtimes/ is the once-built test runtime (no rebuild per test)."""
    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    link = home / "runtimes"
    if not link.exists():
        link.symlink_to(runtime_venv.parents[1])  # <home>/runtimes/openhands/<hash>
    return home


def make_settings(home: Path, script: str, **sections: dict[str, Any]) -> Settings:
    """The real service's settings: the gateway's scripted provider serves MODEL."""
    return Settings(
        home=home,
        sections={
            "gateway": {
                "providers": [
                    {
                        "name": "scripted",
                        "kind": "scripted",
                        "models": [MODEL],
                        "script": script if ":" in script else f"{SCRIPTS}:{script}",
                    }
                ],
                "prices": {MODEL: {"input_per_mtok_usd": 3, "output_per_mtok_usd": 15}},
            },
            "run": {"model": MODEL, "shutdown_grace_s": 0.5},
            **sections,
        },
    )


def make_task(repo: Path, prompt: str = "Fix the failing test.", **fields: Any) -> Task:
    """A task on ``repo``."""
    return Task(id=new_id("task"), project_id="proj", prompt=prompt, repository=str(repo), **fields)
