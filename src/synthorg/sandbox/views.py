"""Neutral bind sources: what /proc/self/mountinfo shows inside names no host location.

For a bind mount, mountinfo shows the mount point inside *and* the source's path from the
root of its filesystem. Choosing neutral mount points is not enough: the source path must be
neutral too. Two ways, neither needing root nor a mount on the host:

- Read-only trees (the runtime venv, the entrypoint's directory) are shown from a hard-link
  farm: a copy of the directory tree whose files are hard links to the originals (no data
  copied), under ``<view root>/ro/<digest>`` where the digest hides the source path. A farm
  is made once per source and reused by every later run and process, so start stays cheap
  (the 38k-file runtime venv costs a few seconds once, then nothing). A farm whose source is
  gone is deleted by the next backend start.
- A read-write state dir is renamed for the run to ``<view root>/run/<random>/state`` and
  renamed back when the run ends (a rename is atomic and copies nothing); a host-only record
  lets the next backend start put back the state of a run whose host died.

Both need the view root on the source's filesystem (hard links and renames do not cross
filesystems); when it is not, the caller binds the host path and says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import stat
import time
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

ROOT_ENV = "SYNTHORG_SANDBOX_VIEW_DIR"
_SOURCE = "source.json"
_RECORD = "record.json"
_ABANDONED_S = 3600.0  # a farm still being made after an hour was left by a dead process


def view_root() -> Path:
    """Host-only dir for farms and moved state (disk-backed, beside most data dirs)."""
    override = os.environ.get(ROOT_ENV)
    return Path(override) if override else Path(f"/var/tmp/synthorg-views-{os.geteuid()}")


def _ensure(root: Path) -> Path:
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)  # host-only: the sandbox never sees this path
    return root


def same_filesystem(path: Path, root: Path | None = None) -> bool:
    """Whether path can be linked or renamed into the view root."""
    try:
        return os.stat(path).st_dev == os.stat(_ensure(root or view_root())).st_dev
    except OSError:
        return False


def link_farm(source: Path, root: Path | None = None) -> Path:
    """A read-only view of source's tree made of hard links, made once and reused.

    Keyed by the source's path, inode and mtime (a rebuilt dir gets a new farm). Raises
    OSError when the farm cannot be made (another filesystem, say).
    """
    base = _ensure((root or view_root()) / "ro")
    source = source.resolve()
    st = os.stat(source)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{source} is not a directory")
    key = f"{source}\0{st.st_ino}\0{st.st_mtime_ns}"
    final = base / hashlib.sha256(key.encode()).hexdigest()[:24]
    if (final / "tree").is_dir():
        return final / "tree"
    tmp = base / f".making-{secrets.token_hex(8)}"
    tmp.mkdir(mode=0o700)
    try:
        (tmp / _SOURCE).write_text(json.dumps({"source": str(source)}))
        _link_tree(source, tmp / "tree")
        try:
            tmp.rename(final)
        except OSError:  # another process made it meanwhile
            if not (final / "tree").is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final / "tree"


def _link_tree(source: Path, dest: Path) -> None:
    """Mirror source's directories, hard-link its files, copy its symlinks (never follows)."""
    os.mkdir(dest)
    for top, dirs, files, top_fd in os.fwalk(source, follow_symlinks=False):
        rel = os.path.relpath(top, source)
        out = dest if rel == "." else dest / rel
        os.chmod(out, os.stat(top_fd).st_mode & 0o7777)
        for name in (*dirs, *files):
            st = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(out / name, 0o700)
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(name, dir_fd=top_fd), out / name)
            elif stat.S_ISREG(st.st_mode):
                os.link(name, out / name, src_dir_fd=top_fd, follow_symlinks=False)
            # sockets, fifos and devices have no place in a runtime: left out


class MovedState:
    """A state dir renamed to a neutral path for one run; ``restore`` puts it back."""

    def __init__(self, dir: Path, origin: Path) -> None:
        self.dir = dir
        self.origin = origin
        self.path = dir / "state"

    @classmethod
    def move(cls, origin: Path, root: Path | None = None) -> MovedState:
        """Rename origin to ``<view root>/run/<random>/state`` (OSError across filesystems)."""
        base = _ensure((root or view_root()) / "run")
        moved = cls(base / secrets.token_hex(12), origin)
        moved.dir.mkdir(mode=0o700)
        record = {"origin": str(origin), "pid": os.getpid()}
        (moved.dir / _RECORD).write_text(json.dumps(record))
        try:
            os.rename(origin, moved.path)
        except OSError:
            shutil.rmtree(moved.dir, ignore_errors=True)
            raise
        return moved

    def restore(self) -> None:
        """Rename the state back; never overwrites a dir that appeared at origin meanwhile."""
        if self.path.exists():
            target = self.origin
            if target.exists():
                target = target.with_name(f"{target.name}.recovered-{self.dir.name}")
                log.error("sandbox.state_restore_conflict", origin=str(self.origin), to=str(target))
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(self.path, target)
        shutil.rmtree(self.dir, ignore_errors=True)


def sweep_stale(root: Path | None = None) -> None:
    """Put back state dirs of runs whose host died; delete farms whose source is gone."""
    base = root or view_root()
    with contextlib.suppress(OSError):
        for entry in (base / "run").iterdir():
            try:
                record = json.loads((entry / _RECORD).read_text())
                pid, origin = int(record["pid"]), Path(record["origin"])
            except (OSError, ValueError, KeyError):
                continue
            if not _alive(pid):
                try:
                    MovedState(entry, origin).restore()
                except OSError as exc:
                    log.warning("sandbox.state_sweep_failed", dir=str(entry), error=str(exc))
    with contextlib.suppress(OSError):
        for entry in (base / "ro").iterdir():
            if entry.name.startswith(".making-"):
                if time.time() - entry.stat().st_mtime > _ABANDONED_S:  # its maker died
                    shutil.rmtree(entry, ignore_errors=True)
                continue
            try:
                source = Path(json.loads((entry / _SOURCE).read_text())["source"])
            except (OSError, ValueError, KeyError):
                continue
            if not source.exists():
                shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
