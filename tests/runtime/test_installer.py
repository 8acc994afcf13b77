"""The uv installer: hash-verified installs with progress by phase, on a real (local) wheel."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from synthorg.errors import BoundaryError
from synthorg.runtime.installer import _Counts, find_uv, install_step, run_step, venv_step
from synthorg.runtime.venvbuild import find_base_python


def _wheel(directory: Path) -> Path:
    """A minimal valid wheel ``tinypkg`` (no index, no network needed)."""
    files = {
        "tinypkg/__init__.py": b"VALUE = 42\n",
        "tinypkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
        "tinypkg-0.1.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("tinypkg-0.1.dist-info/RECORD,,")
    path = directory / "tinypkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("tinypkg-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _lock(directory: Path, wheel: Path, digest: str) -> Path:
    lock = directory / "requirements.lock"
    lock.write_text(f"tinypkg @ {wheel.as_uri()} --hash=sha256:{digest}\n")
    return lock


def _venv(tmp_path: Path, lines: list[str]) -> Path:
    target = tmp_path / "venv"
    run_step(
        venv_step(find_uv(), find_base_python(), target), {"PATH": "/usr/bin:/bin"}, lines.append
    )
    return target / "bin" / "python"


def test_install_reports_each_phase_and_compiles_bytecode(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    lock = _lock(tmp_path, wheel, hashlib.sha256(wheel.read_bytes()).hexdigest())
    lines: list[str] = []
    python = _venv(tmp_path, lines)
    run_step(install_step(find_uv(), lock, python), {"PATH": "/usr/bin:/bin"}, lines.append)
    phases = [line.split("]", 1)[0].lstrip("[") for line in lines]
    assert phases[0] == "venv"
    for phase in ("resolve", "compile", "verify"):
        assert phase in phases, lines
    assert any("Bytecode compiled" in line for line in lines), lines
    # Counted from uv's trace lines, which are never relayed themselves.
    assert "[download] 1 of 1" in lines and "[install] 1 of 1" in lines, lines
    assert not any(" DEBUG " in line or " TRACE " in line for line in lines), lines
    out = subprocess.run(
        [str(python), "-c", "import tinypkg; print(tinypkg.VALUE)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "42"
    # Compiled at install time: a read-only venv never compiles on import.
    assert list((python.parents[1] / "lib").glob("python*/site-packages/tinypkg/__pycache__/*.pyc"))


def test_a_wrong_hash_is_refused_and_nothing_is_installed(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    lock = _lock(tmp_path, wheel, "0" * 64)
    lines: list[str] = []
    python = _venv(tmp_path, lines)
    with pytest.raises(BoundaryError, match="install of the OpenHands lockfile") as caught:
        run_step(install_step(find_uv(), lock, python), {"PATH": "/usr/bin:/bin"}, lines.append)
    assert "hash" in str(caught.value).lower()
    probe = subprocess.run([str(python), "-c", "import tinypkg"], capture_output=True, check=False)
    assert probe.returncode != 0


def test_counts_are_shown_at_every_tenth_not_for_every_package() -> None:
    counts = _Counts()
    counts.feed("Resolved 185 packages in 4.52s")
    for n in range(185):
        counts.feed(f"DEBUG Identified uncached distribution: p{n}==1")
    shown = [
        line
        for n in range(185)
        if (line := counts.feed(f"TRACE Released lock at `/c/wheels-v8/pypi/p{n}/1.lock`"))
    ]
    assert shown[0] == "[download] 18 of 185" and shown[-1] == "[download] 185 of 185"
    assert len(shown) == 11  # 18, 36, ... 180, then the last
    installed = [
        counts.feed(f'TRACE Extracted wheel files name=PackageName("p{n}")') for n in range(185)
    ]
    assert [line for line in installed if line][-1] == "[install] 185 of 185"
