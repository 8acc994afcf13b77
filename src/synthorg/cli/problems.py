"""Environment problems (disk, permissions, the store) as one line naming the fix."""

from __future__ import annotations

import errno
import os
import sys

from synthorg.cli.untrusted import visible
from synthorg.extras import missing_extra

_FIXES = {
    errno.EACCES: "make it writable, or point SYNTHORG_HOME at a writable directory",
    errno.EPERM: "make it writable, or point SYNTHORG_HOME at a writable directory",
    errno.EROFS: "it is on a read-only file system: point SYNTHORG_HOME at a writable one",
    errno.ENOSPC: "the disk is full: free some space (or move SYNTHORG_HOME)",
    errno.EDQUOT: "the disk quota is exhausted: free some space (or move SYNTHORG_HOME)",
    errno.ENOTDIR: "a path component is a file, not a directory: check SYNTHORG_HOME",
    errno.EEXIST: "a file is in the way of a directory: check SYNTHORG_HOME",
    errno.ENOENT: "a parent directory does not exist: check SYNTHORG_HOME and the paths given",
}


def environment_problem(exc: BaseException) -> str | None:
    """One line saying what is wrong with the host and how to fix it; None if it is a bug."""
    extra = missing_extra(exc)
    if extra is not None:
        return extra
    if isinstance(exc, OSError) and exc.errno in _FIXES:
        where = exc.filename if exc.filename is not None else ""
        reason = os.strerror(exc.errno) if exc.errno is not None else str(exc)
        return f"{visible(str(where), newlines=False)}: {reason.lower()}: {_FIXES[exc.errno]}"
    sqlite3 = sys.modules.get("sqlite3")  # not imported: not a SQLite error (saves start-up)
    if sqlite3 is not None and isinstance(exc, sqlite3.Error):
        text = str(exc)
        if "readonly" in text or "read-only" in text:
            return f"the store is read-only ({text}): make it writable, or set [store] url"
        if "locked" in text or "busy" in text:
            return f"the store is locked by another process ({text}): retry when it finishes"
        if "unable to open" in text or "disk" in text:
            return f"cannot open the store ({text}): check SYNTHORG_HOME is a writable directory"
        return None
    if type(exc).__module__.startswith("psycopg") and type(exc).__name__ == "OperationalError":
        first = visible(
            str(exc).strip().splitlines()[0] if str(exc).strip() else "", newlines=False
        )
        return f"cannot use PostgreSQL ({first}): check [store] url and that the server is up"
    if exc.__cause__ is not None and exc.__cause__ is not exc:
        return environment_problem(exc.__cause__)
    return None
