"""Settings for end-to-end runs of the real service with the OpenHands loop (tests and host)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from synthorg.domain import Task
from synthorg.settings import Settings
from tests import support
from tests.support import scripted_settings

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
    return scripted_settings(
        home, script if ":" in script else f"{SCRIPTS}:{script}", model=MODEL, **sections
    )


def make_task(repo: Path, prompt: str = "Fix the failing test.", **fields: Any) -> Task:
    """A task on ``repo``."""
    return support.make_task(repo, prompt, **fields)
