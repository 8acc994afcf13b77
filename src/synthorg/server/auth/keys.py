"""API keys in a small JSON file (mode 0600): hashed, mapped to principals and roles.

A key reads ``so_<key id>_<secret>``. Only the SHA-256 of the whole key is stored: the key
carries 256 random bits, so a plain hash is as strong as a slow one, and lookups go by the
key id so the comparison of hashes is one constant-time compare. The file is re-read when
it changes on disk, so keys made with ``synthorg serve keys`` work on a running server.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import threading
from collections.abc import Collection, Iterator
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from synthorg.domain.ids import ProjectId
from synthorg.errors import ConfigError, NotFoundError, UsageError
from synthorg.localsock import private_dir
from synthorg.server.auth.principal import Principal, Role

_PREFIX = "so"


class ApiKey(BaseModel):
    """One key as stored (never the key itself)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="Public key id, the second part of the key.")
    principal: str = Field(min_length=1, description="Who the key authenticates.")
    roles: tuple[Role, ...] = Field(min_length=1, description="Roles granted.")
    projects: tuple[ProjectId, ...] = Field(
        default=(), description="Projects the key is scoped to; empty: every project."
    )
    sha256: str = Field(description="Hex SHA-256 of the whole key.")
    created_at: datetime = Field(description="When it was made (UTC).")
    revoked_at: datetime | None = Field(default=None, description="When revoked, if ever.")

    def as_principal(self) -> Principal | None:
        """Who this key authenticates; None once it is revoked."""
        if self.revoked_at is not None:
            return None
        return Principal(
            name=self.principal,
            roles=frozenset(self.roles),
            key_id=self.id,
            projects=frozenset(self.projects) if self.projects else None,
        )


class _KeyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = Field(default=1, description="File format version.")
    keys: list[ApiKey] = Field(default_factory=list, description="Every key, revoked included.")


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _parse(key: str) -> str | None:
    """The key id of a well-formed key, else None."""
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != _PREFIX or not parts[1] or len(parts[2]) < 32:
        return None
    return parts[1]


class KeyStore:
    """The key file: create, list, revoke, authenticate."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._cache: dict[str, ApiKey] = {}
        self._stamp: tuple[int, int] | None = None

    # -- file access ---------------------------------------------------------------------
    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _read(self) -> _KeyFile:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return _KeyFile()
        try:
            return _KeyFile.model_validate_json(raw)
        except ValidationError as exc:
            raise ConfigError(
                f"API key file {self.path} is corrupt ({exc.error_count()} errors): restore it "
                "or delete it and create new keys with `synthorg serve keys create`"
            ) from exc

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # A lock file next to the key file serialises the CLI and a running server.
        private_dir(self.path.parent)
        lock_path = self.path.with_suffix(".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write(self, data: _KeyFile) -> None:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data.model_dump(mode="json"), indent=2))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        tmp.replace(self.path)

    def _keys(self) -> dict[str, ApiKey]:
        with self._lock:
            stamp = self._stat()
            if stamp != self._stamp:
                self._cache = {key.id: key for key in self._read().keys}
                self._stamp = stamp
            return self._cache

    # -- operations ----------------------------------------------------------------------
    def create(
        self,
        principal: str,
        roles: set[Role] | frozenset[Role],
        projects: Collection[str] = (),
    ) -> tuple[ApiKey, str]:
        """Make a key (scoped to ``projects`` when given); returns its record and the key
        itself (shown once, never stored)."""
        if not principal.strip():
            raise UsageError("a key needs a principal name (who it authenticates)")
        if not roles:
            raise UsageError("a key needs at least one role: viewer, operator, approver, admin")
        key_id = secrets.token_hex(6)
        key = f"{_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        try:
            record = ApiKey(
                id=key_id,
                principal=principal.strip(),
                roles=tuple(sorted(roles)),
                projects=tuple(sorted(set(projects))),
                sha256=_digest(key),
                created_at=datetime.now(UTC),
            )
        except ValidationError as exc:
            raise UsageError(
                f"invalid key request: {exc.errors()[0]['msg']} (project ids use letters, "
                "digits, '.', '_' and '-')"
            ) from exc
        with self._locked():
            data = self._read()
            data.keys.append(record)
            self._write(data)
        return record, key

    def list(self) -> list[ApiKey]:
        """Every key record, revoked ones included, oldest first."""
        return sorted(self._keys().values(), key=lambda k: k.created_at)

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key by id; revoking twice keeps the first time."""
        with self._locked():
            data = self._read()
            for index, key in enumerate(data.keys):
                if key.id == key_id:
                    if key.revoked_at is None:
                        key = key.model_copy(update={"revoked_at": datetime.now(UTC)})
                        data.keys[index] = key
                        self._write(data)
                    return key
        raise NotFoundError(f"no API key {key_id!r}; list them with `synthorg serve keys list`")

    def authenticate(self, key: str) -> Principal | None:
        """The principal of a valid, unrevoked key; None otherwise."""
        key_id = _parse(key)
        if key_id is None:
            return None
        record = self._keys().get(key_id)
        if record is None or not hmac.compare_digest(record.sha256, _digest(key)):
            return None
        return record.as_principal()
