"""Worlds whose workers are separate machines: one data dir each, projects only on a remote."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from synthorg.service.demo import create_demo_repo
from tests.distributed.support import MODELS, TemporalWorld
from tests.gitremote import GitDaemon

TRAVEL = "tests.distributed.scripts:travel_then_fix"
SETTLE = "tests.distributed.scripts:settle_then_read"


@dataclass(frozen=True)
class TravelWorld(TemporalWorld):
    """A Temporal world whose processes each get their own ``SYNTHORG_HOME``.

    The config (shared) names the projects by their remote URL only: no process is given a
    local path of any repository, so a worker can only work on one through its own mirror.
    """

    home_name: str = "home"
    remotes: tuple[tuple[str, str], ...] = ()

    @property
    def home(self) -> Path:
        return self.root / self.home_name

    @property
    def config(self) -> Path:
        path = self.root / "synthorg.toml"
        if not path.exists():
            text = TemporalWorld.config.fget(self).read_text()  # type: ignore[attr-defined]
            models, scripts = f"models = {json.dumps(list(MODELS))}", "scripts = {"
            assert models in text and scripts in text
            text = text.replace(models, models[:-1] + ', "travel", "settle"]')
            text = text.replace(scripts, f'{scripts} travel = "{TRAVEL}", settle = "{SETTLE}",')
            for name, url in self.remotes:
                text += f'[projects.{name}]\nremote = "{url}"\n'
            path.write_text(text)
        return path

    def machine(self, name: str) -> TravelWorld:
        """The same world seen from another machine (its own data dir)."""
        return replace(self, home_name=f"home-{name}")


def serve_projects(daemon: GitDaemon, root: Path, names: list[str]) -> tuple[tuple[str, str], ...]:
    """Demo repositories published on the daemon (their sources then deleted): name -> URL."""
    served = []
    for name in names:
        source = create_demo_repo(root / "sources" / name)
        daemon.publish(name, source)
        shutil.rmtree(source)
        served.append((name, daemon.url(name)))
    return tuple(served)
