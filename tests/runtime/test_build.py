"""Runtime venv lookup and build: atomic, isolated from the main venv, cached by lock hash."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from synthorg.errors import BoundaryError, ConfigError
from synthorg.runtime import OpenHandsRuntime, build_runtime, find_runtime, runtime_status
from synthorg.runtime.files import FILES_ENV, entrypoint_path
from synthorg.runtime.openhands import MARKER_NAME, lock_hash


def test_main_venv_cannot_import_the_sdk() -> None:
    assert importlib.util.find_spec("openhands") is None
    assert importlib.util.find_spec("litellm") is None


def test_nothing_built_in_an_empty_home(tmp_path: Path) -> None:
    assert find_runtime(tmp_path) is None
    status = runtime_status(tmp_path)
    assert not status.built
    assert status.python is None
    assert status.venv_path == tmp_path / "runtimes" / "openhands" / lock_hash()
    assert status.entrypoint == entrypoint_path()


def test_home_defaults_to_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTHORG_HOME", str(tmp_path))
    assert runtime_status().venv_path.is_relative_to(tmp_path)


def test_failed_build_leaves_no_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = tmp_path / "files"
    files.mkdir()
    # A requirement without a hash: pip refuses it under --require-hashes, offline.
    (files / "requirements.lock").write_text("six==1.17.0\n")
    for name in ("run_task.py", "synthorg_oh_events.py", "synthorg_oh_terminal.py"):
        (files / name).write_text((entrypoint_path().parent / name).read_text())
    monkeypatch.setenv(FILES_ENV, str(files))
    home = tmp_path / "home"
    lines: list[str] = []
    with pytest.raises(BoundaryError, match="install of the OpenHands lockfile"):
        build_runtime(home, lines.append)
    assert any("hash" in line.lower() for line in lines), lines
    parent = home / "runtimes" / "openhands"
    assert [p.name for p in parent.iterdir()] == [".build.lock"]
    assert find_runtime(home) is None


def test_wrong_interpreter_is_an_operator_error(tmp_path: Path) -> None:
    other = tmp_path / "python3.11"
    other.write_text("#!/bin/sh\necho 3.11\n")
    other.chmod(0o755)
    with pytest.raises(ConfigError, match=r"Python 3\.11"):
        build_runtime(tmp_path, base_python=other)
    assert find_runtime(tmp_path) is None


def test_missing_files_say_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FILES_ENV, str(tmp_path))
    with pytest.raises(ConfigError, match=FILES_ENV):
        entrypoint_path()


@pytest.mark.openhands
def test_built_runtime_imports_the_sdk(openhands_runtime: OpenHandsRuntime) -> None:
    assert (openhands_runtime.venv_path / MARKER_NAME).is_file()
    assert openhands_runtime.lock_hash == lock_hash()
    out = subprocess.run(
        [
            str(openhands_runtime.python),
            "-c",
            "import sys, openhands.sdk, openhands.tools; print(sys.prefix)",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    assert Path(out.stdout.strip()) == openhands_runtime.venv_path


@pytest.mark.openhands
def test_second_build_reuses_the_runtime(openhands_runtime: OpenHandsRuntime) -> None:
    home = openhands_runtime.venv_path.parents[2]
    lines: list[str] = []
    again = build_runtime(home, lines.append)
    assert again == openhands_runtime
    assert lines == [f"OpenHands runtime {again.lock_hash} already built at {again.venv_path}"]
    assert find_runtime(home) == openhands_runtime
    assert runtime_status(home).built
