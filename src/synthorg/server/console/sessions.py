"""Console sessions: an API key exchanged once for a random session token (the cookie).

Only the SHA-256 of the token is kept, with the key id it stands for, its CSRF token and its
expiry, in a small JSON file (mode 0600) next to the key file, so a restarted server keeps its
signed-in browsers. The API key itself is never stored: a session resolves to the key's
current record on every request, so revoking the key ends its sessions at once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from synthorg.localsock import private_dir

SESSION_TTL = timedelta(hours=12)


class Session(BaseModel):
    """One signed-in browser (never the API key, never the session token)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_id: str = Field(description="The API key this session stands for.")
    csrf: str = Field(description="Per-session token every mutating call must echo.")
    created_at: datetime = Field(description="Sign-in time (UTC).")
    expires_at: datetime = Field(description="When the session stops working (UTC).")


class _SessionFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    sessions: dict[str, Session] = Field(default_factory=dict, description="By token hash.")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class SessionStore:
    """Sessions in memory, persisted to ``path`` when one is given."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._data = self._load()

    def _load(self) -> _SessionFile:
        if self.path is None:
            return _SessionFile()
        try:
            return _SessionFile.model_validate_json(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValidationError, ValueError):
            return _SessionFile()  # a lost or corrupt file signs everyone out, nothing more

    def _save(self) -> None:
        if self.path is None:
            return
        private_dir(self.path.parent)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(self._data.model_dump(mode="json")))
        tmp.replace(self.path)

    def create(self, key_id: str) -> tuple[str, Session]:
        """A new session for ``key_id``: the token (for the cookie) and its record."""
        now = datetime.now(UTC)
        token = secrets.token_urlsafe(32)
        session = Session(
            key_id=key_id,
            csrf=secrets.token_urlsafe(32),
            created_at=now,
            expires_at=now + SESSION_TTL,
        )
        with self._lock:
            live = {k: s for k, s in self._data.sessions.items() if s.expires_at > now}
            live[_digest(token)] = session
            self._data.sessions = live
            self._save()
        return token, session

    def get(self, token: str) -> Session | None:
        """The live session of a cookie token; None when unknown or expired."""
        session = self._data.sessions.get(_digest(token))
        if session is None or session.expires_at <= datetime.now(UTC):
            return None
        return session

    def delete(self, token: str) -> None:
        """Sign out: the token stops working everywhere (REST and open sockets)."""
        with self._lock:
            if self._data.sessions.pop(_digest(token), None) is not None:
                self._save()


def same_token(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a presented token with the expected one."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
