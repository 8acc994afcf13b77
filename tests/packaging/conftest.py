"""The wheel built and installed outside the repo once a session; the image build started early."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from uv import find_uv_bin

from tests.packaging import image_build

REPO = Path(__file__).resolve().parents[2]


def pytest_collection_finish(session: pytest.Session) -> None:
    """The image build starts now, beside the tests before test_image.py, if they are run."""
    items = session.items
    if session.config.option.collectonly or not image_build.wanted():
        return
    if any(item.get_closest_marker("image") for item in items):
        image_build.BUILD.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A session that ends before test_image.py's teardown (-x, ^C) removes the build too;
    the session ends once its work dir is deleted."""
    image_build.BUILD.remove()
    image_build.BUILD.wait_removed()


@dataclass(frozen=True)
class Installed:
    """The built distributions and a venv holding only the installed wheel."""

    wheel: Path
    sdist: Path
    venv: Path
    workdir: Path

    @property
    def synthorg(self) -> Path:
        return self.venv / "bin" / "synthorg"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, home: Path) -> dict[str, str]:
        """A clean environment: no PYTHONPATH, no project venv, the venv's bin first."""
        keep = ("PATH", "LANG", "LC_ALL", "TERM", "USER", "LOGNAME", "HOME", "TMPDIR")
        env = {key: os.environ[key] for key in keep if key in os.environ}
        env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        env["SYNTHORG_HOME"] = str(home)
        env["NO_COLOR"] = "1"
        env["COLUMNS"] = "200"
        return env


def _uv(*args: str, cwd: Path) -> None:
    subprocess.run([find_uv_bin(), *args], cwd=cwd, check=True, capture_output=True, timeout=600)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """``uv build`` of this checkout, then the wheel installed into a fresh venv elsewhere."""
    dist = tmp_path_factory.mktemp("dist")
    _uv("build", "--out-dir", str(dist), cwd=REPO)
    wheel = next(dist.glob("synthorg-*.whl"))
    sdist = next(dist.glob("synthorg-*.tar.gz"))
    outside = tmp_path_factory.mktemp("outside")
    venv = outside / "venv"
    _uv("venv", "--quiet", "--python", "3.12", str(venv), cwd=outside)
    _uv(
        "pip",
        "install",
        "--quiet",
        "--python",
        str(venv / "bin" / "python"),
        str(wheel),
        cwd=outside,
    )
    yield Installed(wheel=wheel, sdist=sdist, venv=venv, workdir=outside)
