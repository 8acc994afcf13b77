"""The wheel and sdist: metadata, shipped files, and the installed CLI run outside the repo."""

from __future__ import annotations

import email.parser
import signal
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from synthorg.runtime.files import REQUIRED
from synthorg.runtime.judge import REQUIRED as JUDGE_FILES
from tests.packaging.conftest import REPO, Installed
from tests.support import free_port

pytestmark = pytest.mark.packaging


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode())


def test_wheel_metadata_names_licence_urls_extras_and_entry_point(installed: Installed) -> None:
    meta = _metadata(installed.wheel)
    assert meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == ">=3.12"
    classifiers = meta.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.12" in classifiers
    assert "Operating System :: POSIX :: Linux" in classifiers
    urls = {u.split(",")[0] for u in meta.get_all("Project-URL") or []}
    assert {"Homepage", "Source", "Issues"} <= urls
    assert {"postgres", "temporal"} <= set(meta.get_all("Provides-Extra") or [])
    requires = meta.get_all("Requires-Dist") or []
    # psycopg only with [postgres]: a plain install runs on the embedded SQLite store.
    assert all("extra ==" in r for r in requires if r.startswith("psycopg"))
    with zipfile.ZipFile(installed.wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(
            next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        ).decode()
    assert "synthorg = synthorg.cli.app:main" in entry_points
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "synthorg/py.typed" in names
    assert "synthorg/cli/templates/synthorg.toml" in names  # `synthorg init` renders it
    for required in REQUIRED:  # the OpenHands runtime's lockfile and entrypoint
        assert f"synthorg/runtime/openhands_files/{required}" in names
    for required in JUDGE_FILES:  # the eval judge's lockfile and pytest.ini
        assert f"synthorg/runtime/judge_files/{required}" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_sdist_builds_the_same_wheel_inputs(installed: Installed) -> None:
    with tarfile.open(installed.sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"LICENSE", "pyproject.toml", "README.md", "src/synthorg/cli/app.py"} <= names
    for required in REQUIRED:
        assert f"runtimes/openhands/{required}" in names
    for required in JUDGE_FILES:
        assert f"runtimes/judge/{required}" in names


def test_installed_package_is_the_wheel_not_the_checkout(installed: Installed) -> None:
    home = installed.workdir / "home-where"
    out = subprocess.run(
        [
            str(installed.python),
            "-c",
            "import synthorg.runtime.files as f, synthorg; "
            "print(synthorg.__file__); print(f.runtime_files_dir())",
        ],
        cwd=installed.workdir,
        env=installed.env(home),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    site = installed.venv / "lib"
    assert all(Path(line).is_relative_to(site) for line in out), out
    assert not any(Path(line).is_relative_to(REPO) for line in out)


def test_installed_doctor_and_demo_run(installed: Installed) -> None:
    home = installed.workdir / "home-demo"
    doctor = subprocess.run(
        [str(installed.synthorg), "doctor"],
        cwd=installed.workdir,
        env=installed.env(home),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "store" in doctor.stdout and "bubblewrap" in doctor.stdout
    repo = installed.workdir / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    init = subprocess.run(
        [str(installed.synthorg), "init", "--no-check", str(repo)],
        cwd=installed.workdir,
        env=installed.env(home),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert init.returncode == 0, init.stdout + init.stderr
    config = repo / "synthorg.toml"
    demo = subprocess.run(
        [str(installed.synthorg), "demo", "--config", str(config)],
        cwd=installed.workdir,
        env=installed.env(home),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "tests PASS" in demo.stdout
    assert "+    return a + b" in demo.stdout


def wait_ready(url: str, process: subprocess.Popen[str], deadline_s: float) -> dict[str, object]:
    """Poll ``url`` until it answers 200, the process dies, or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    last: object = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited {process.returncode} before ready")
        try:
            response = httpx.get(url, timeout=2.0)
            if response.status_code == 200:
                body: dict[str, object] = response.json()
                return body
            last = response.status_code
        except httpx.TransportError as exc:
            last = exc
        time.sleep(0.1)  # polling interval of a condition wait, not a synchronisation
    raise AssertionError(f"{url} not ready within {deadline_s} s (last: {last!r})")


def test_installed_serve_answers_ready_and_stops_on_sigterm(installed: Installed) -> None:
    home = installed.workdir / "home-serve"
    port = free_port()
    env = {**installed.env(home), "SYNTHORG_LOG_LEVEL": "INFO"}
    with subprocess.Popen(
        [str(installed.synthorg), "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=installed.workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            body = wait_ready(f"http://127.0.0.1:{port}/ready", process, deadline_s=90)
            assert body == {"ready": True, "detail": ""}
            process.terminate()
            _, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    # uvicorn re-raises SIGTERM after its graceful shutdown: exit by the signal, shutdown logged.
    assert process.returncode in (0, -signal.SIGTERM), stderr
    assert "SERVER_SHUTDOWN" in stderr


def test_plain_install_has_no_psycopg_and_a_postgres_url_names_the_extra(
    installed: Installed,
) -> None:
    home = installed.workdir / "home-pg"
    env = {
        **installed.env(home),
        "SYNTHORG__STORE__URL": "postgresql://synthorg@127.0.0.1/x",
        "COLUMNS": "500",  # one table row per check: the message is not wrapped
    }
    doctor = subprocess.run(
        [str(installed.synthorg), "doctor"],
        cwd=installed.workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    store = next(line for line in doctor.stdout.splitlines() if "│ store " in line)
    assert "FAIL" in store and "pip install 'synthorg[postgres]'" in store, store


@pytest.mark.parametrize(
    ("argv", "module", "extra"),
    [
        (["worker"], "temporalio", "temporal"),
        (["run", "--engine", "temporal", "--repo", ".", "a task"], "temporalio", "temporal"),
    ],
)
def test_plain_install_leaves_out_plotly_and_temporal_and_names_the_extra(
    installed: Installed, argv: list[str], module: str, extra: str
) -> None:
    absent = subprocess.run(
        [str(installed.python), "-c", f"import {module}"],
        cwd=installed.workdir,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert absent.returncode == 1, f"{module} is in a plain install"
    home = installed.workdir / f"home-extra-{extra}"
    result = subprocess.run(
        [str(installed.synthorg), *argv],
        cwd=installed.workdir,
        env={**installed.env(home), "COLUMNS": "500"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out
    assert f"{module} is not installed" in out and f"pip install 'synthorg[{extra}]'" in out, out
    meta = _metadata(installed.wheel)
    assert extra in (meta.get_all("Provides-Extra") or [])
    assert any(
        r.startswith(module) and f"extra == '{extra}'" in r
        for r in meta.get_all("Requires-Dist") or []
    )
