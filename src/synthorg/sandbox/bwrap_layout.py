"""What a bwrap sandbox sees where: the paths inside, the host interpreter shown there,
and the staged files copied in at every start (bwrap.py starts the sandbox)."""

from __future__ import annotations

import functools
import os
import py_compile
import shutil
import sys
from pathlib import Path

from synthorg.sandbox.views import PYTHON_DIR, base_python_dir, staging_dir

WORKSPACE = "/workspace"
STATE = "/state"
HOME = "/tmp/home"
INSIDE_DIR = "/opt/synthorg"
RUNTIME_DIR = "/opt/runtime"
"""Runtime binds appear at /opt/runtime/<index> inside."""
SOCKET_DIR = "/run/synthorg"
_PACKAGE_DIR = Path(__file__).resolve().parent
_ETC_FILES = ("passwd", "group", "nsswitch.conf", "ld.so.cache", "localtime")
_SCRIPTS = ("launcher.py", "toolbox.py")
_HOSTS = "127.0.0.1 localhost\n::1 localhost\n"
#: What the sandbox sees as a worktree's ``.git`` file: it names no host path, and git
#: inside fails on it exactly as it did on the real one (whose git dir is not mounted).
NEUTRAL_DOTGIT = "gitdir: /nonexistent/synthorg-host-git\n"


def prepare_overlay() -> tuple[Path, int, list[tuple[Path, str]]]:
    """A host-only staging dir (views.staging_dir) and its lock fd, and the files the sandbox
    gets as copies (``--file``: no mount, so mountinfo names no staging path): (staged
    file, path inside). Also a dir for per-run socket links and the neutral ``.git``."""
    root, lock_fd = staging_dir()
    (root / "links").mkdir(mode=0o700)  # per-run hard links of forwarded sockets
    files: list[tuple[Path, str]] = []
    for name in _ETC_FILES:
        source = Path("/etc") / name
        if source.is_file():  # a symlink's target (localtime)
            shutil.copyfile(source, root / name)
            files.append((root / name, f"/etc/{name}"))
    (root / "hosts").write_text(_HOSTS)
    files.append((root / "hosts", "/etc/hosts"))
    (root / "dotgit").write_text(NEUTRAL_DOTGIT)
    for script in _SCRIPTS:
        # Bytecode, compiled once here: a script named on the command line is compiled from
        # source at every start (~3 ms of the toolbox's CPU per run), a .pyc is not. The
        # sandbox runs the host's base interpreter, so the bytecode's version matches; its
        # code names the path inside, never the staging dir.
        compiled = root / f"{script}c"
        py_compile.compile(
            str(_PACKAGE_DIR / script),
            cfile=str(compiled),
            dfile=f"{INSIDE_DIR}/{script}",
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        files.append((compiled, f"{INSIDE_DIR}/{script}c"))
    return root, lock_fd, files


def remove_overlay(root: Path, lock_fd: int) -> None:
    shutil.rmtree(root, ignore_errors=True)
    os.close(lock_fd)


def host_python_dir() -> Path:
    """The host interpreter's install dir (shown read-only at PYTHON_DIR inside)."""
    return base_python_dir()


def python_name() -> str:
    return f"python{sys.version_info.major}.{sys.version_info.minor}"


def host_python() -> str:
    """The base interpreter (not a venv shim) on the host (the local backend's)."""
    candidate = host_python_dir() / "bin" / python_name()
    return str(candidate if candidate.exists() else Path(sys.executable).resolve())


def python_in_sandbox() -> str:
    """The base interpreter as a bwrap sandbox sees it (its install dir at PYTHON_DIR)."""
    return f"{PYTHON_DIR}/bin/{python_name()}"


@functools.cache
def library_path() -> dict[str, str]:
    """LD_LIBRARY_PATH for a shared-libpython interpreter: its RUNPATH names the host dir
    (/root/.pyenv/.../lib), which is not where it is inside."""
    shared = any((host_python_dir() / "lib").glob("libpython3*.so*"))
    return {"LD_LIBRARY_PATH": f"{PYTHON_DIR}/lib"} if shared else {}
