"""Neutral bind sources: mountinfo inside names neither the state dir nor a runtime bind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from synthorg.sandbox import BwrapSandbox
from synthorg.sandbox.views import (
    PYTHON_DIR,
    MovedState,
    base_python_dir,
    link_farm,
    staging_dir,
    sweep_stale,
)

from .helpers import collect, py, request


@pytest.mark.bwrap
async def test_mountinfo_names_neither_the_state_dir_nor_the_runtime(
    bwrap: BwrapSandbox, workspace: Path, tmp_path: Path
) -> None:
    data = workspace.parent.parent
    conversation = "conv-0123456789abcdef"
    runtime = data / "runtimes" / "openhands" / "lockhash"
    (runtime / "pkg").mkdir(parents=True)
    (runtime / "pkg" / "marker.txt").write_text("runtime")
    (runtime / "link").symlink_to("pkg/marker.txt")
    runtime.chmod(0o700)  # as a venv built in a private temp dir is
    state = data / "openhands" / conversation
    state.mkdir(parents=True)
    (state / "old.json").write_text("kept")
    marker = bwrap.runtime_path_inside([runtime], runtime / "pkg" / "marker.txt")
    code = f"""
import json
print(json.dumps({{
    "mountinfo": open("/proc/self/mountinfo").read(),
    "runtime": open({marker!r}).read(),
    "link": open({bwrap.runtime_path_inside([runtime], runtime / "link")!r}).read(),
    "old": open("/state/old.json").read(),
}}))
open("/state/new.json", "w").write("written")
"""
    req = request(
        workspace, py(code), state_dir=state, runtime_binds=[runtime], conversation_id=conversation
    )
    lines, ended = await collect(bwrap, req)
    assert ended.returncode == 0, ended
    seen = json.loads(lines[-1])
    assert seen["runtime"] == seen["link"] == "runtime" and seen["old"] == "kept"
    assert marker.startswith("/opt/runtime/0/")
    for secret in (str(tmp_path), conversation, "runtimes", "openhands"):
        assert secret not in seen["mountinfo"], (secret, seen["mountinfo"])
    assert " /state " in seen["mountinfo"] and " /opt/runtime/0 " in seen["mountinfo"]
    # The state dir is back where the host keeps it, with what the run wrote.
    assert (state / "new.json").read_text() == "written" and (state / "old.json").exists()


def test_farm_is_made_once_and_dropped_when_its_source_is_gone(tmp_path: Path) -> None:
    root, source = tmp_path / "views", tmp_path / "venv"
    (source / "lib").mkdir(parents=True)
    (source / "lib" / "a.py").write_text("a")
    farm = link_farm(source, root)
    assert (farm / "lib" / "a.py").stat().st_ino == (source / "lib" / "a.py").stat().st_ino
    assert link_farm(source, root) == farm  # reused, not re-made
    assert str(source) not in str(farm)
    (source / "lib" / "a.py").unlink()
    (source / "lib").rmdir()
    source.rmdir()
    sweep_stale(root)
    assert not farm.exists()


def test_a_farm_is_remade_when_its_watched_dir_changes(tmp_path: Path) -> None:
    """The interpreter's farm watches site-packages: a package installed there later (the
    install dir's own mtime unchanged) is seen inside once the next backend starts."""
    root, prefix = tmp_path / "views", tmp_path / "python"
    site = prefix / "lib" / "site-packages"
    site.mkdir(parents=True)
    top = prefix.stat().st_mtime_ns
    farm = link_farm(prefix, root, watch=site)
    (site / "newpkg.py").write_text("x = 1\n")
    os.utime(site, ns=(site.stat().st_atime_ns, site.stat().st_mtime_ns + 1_000_000))
    assert prefix.stat().st_mtime_ns == top
    again = link_farm(prefix, root, watch=site)
    assert again != farm and (again / "lib" / "site-packages" / "newpkg.py").exists()


def test_a_venvs_farm_names_the_interpreter_at_its_neutral_path(tmp_path: Path) -> None:
    """pyvenv.cfg and the interpreter links of the farm name PYTHON_DIR; the venv's own
    files (hard-linked into the farm) are untouched."""
    root, venv = tmp_path / "views", tmp_path / "venv"
    base = base_python_dir()
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base}/bin\nversion_info = 3\n")
    (venv / "bin" / "python").symlink_to(f"{base}/bin/python3")
    (venv / "bin" / "python3").symlink_to("python")
    farm = link_farm(venv, root)
    assert (farm / "pyvenv.cfg").read_text() == f"home = {PYTHON_DIR}/bin\nversion_info = 3\n"
    assert (farm / "bin" / "python").readlink() == Path(f"{PYTHON_DIR}/bin/python3")
    assert (farm / "bin" / "python3").readlink() == Path("python")
    assert (venv / "pyvenv.cfg").read_text() == f"home = {base}/bin\nversion_info = 3\n"
    assert (venv / "bin" / "python").readlink() == Path(f"{base}/bin/python3")


def test_a_staging_dir_is_swept_only_once_its_owner_is_gone(tmp_path: Path) -> None:
    root = tmp_path / "views"
    stage, fd = staging_dir(root)
    os.utime(stage, (0, 0))  # past the grace a new dir gets before its lock is taken
    sweep_stale(root)
    assert stage.is_dir(), "its owner (this process) holds the lock"
    os.close(fd)
    sweep_stale(root)
    assert not stage.exists()


def test_state_of_a_dead_host_is_put_back_by_the_sweep(tmp_path: Path) -> None:
    root, state = tmp_path / "views", tmp_path / "home" / "openhands" / "conv-1"
    state.mkdir(parents=True)
    (state / "base_state.json").write_text("{}")
    code = (
        "import sys; from pathlib import Path; from synthorg.sandbox.views import MovedState; "
        "print(MovedState.move(Path(sys.argv[1]), Path(sys.argv[2])).path)"
    )
    moved = subprocess.run(
        [sys.executable, "-c", code, str(state), str(root)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert not state.exists() and (Path(moved) / "base_state.json").exists()
    sweep_stale(root)  # the process that moved it has exited
    assert (state / "base_state.json").read_text() == "{}"
    assert not list((root / "run").iterdir())


def test_a_live_runs_state_is_left_alone_by_the_sweep(tmp_path: Path) -> None:
    root, state = tmp_path / "views", tmp_path / "openhands" / "conv-1"
    state.mkdir(parents=True)
    moved = MovedState.move(state, root)
    sweep_stale(root)  # this process holds the run's lock: it is alive
    assert moved.path.is_dir() and not state.exists()
    moved.restore()
    assert state.is_dir() and not list((root / "run").iterdir())


def test_restore_never_overwrites_a_state_dir_that_reappeared(tmp_path: Path) -> None:
    root, state = tmp_path / "views", tmp_path / "openhands" / "conv-1"
    state.mkdir(parents=True)
    (state / "a").write_text("moved")
    moved = MovedState.move(state, root)
    state.mkdir()
    (state / "a").write_text("new")
    moved.restore()
    assert (state / "a").read_text() == "new"
    kept = [p for p in state.parent.iterdir() if p.name.startswith("conv-1.recovered-")]
    assert len(kept) == 1 and (kept[0] / "a").read_text() == "moved"


@pytest.mark.bwrap
async def test_without_a_view_the_host_path_is_bound_and_the_boundary_says_so(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view dir on another filesystem (a tmpfs) cannot hold hard links or a renamed state
    dir: the run still works, bound from host paths, and the filesystem row turns weaker."""
    from synthorg.sandbox.protocol import BoundaryStatus

    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs a /dev/shm on its own filesystem")
    views = Path(tempfile.mkdtemp(dir=shm))
    monkeypatch.setenv("SYNTHORG_SANDBOX_VIEW_DIR", str(views))
    sandbox = BwrapSandbox()  # its own: the session's stays as declared
    runtime, state = tmp_path / "runtime", tmp_path / "state"
    runtime.mkdir()
    (runtime / "m.txt").write_text("rt")
    inside = sandbox.runtime_path_inside([runtime], runtime / "m.txt")
    code = f"print(open({inside!r}).read()); open('/state/s.txt', 'w').write('s')"
    try:
        lines, ended = await collect(
            sandbox, request(workspace, py(code), state_dir=state, runtime_binds=[runtime])
        )
    finally:
        shutil.rmtree(views, ignore_errors=True)
    assert ended.returncode == 0 and lines == ["rt"], (lines, ended)
    assert (state / "s.txt").read_text() == "s"
    row = {r.boundary: r for r in sandbox.boundary().rows}["filesystem"]
    assert row.status is BoundaryStatus.WEAKER, row
    assert "state dir" in (row.warning or "") and "runtime bind" in (row.warning or ""), row
