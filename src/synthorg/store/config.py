"""The ``[store]`` configuration section: where the store lives and how secrets are sealed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from synthorg.paths import synthorg_home
from synthorg.store.secrets import SecretCipher

STORE_FILE = "store.db"


@dataclass(frozen=True)
class PgTimeouts:
    """Every PostgreSQL wait is bounded: connecting, a statement, a pool checkout."""

    connect_s: float = 5.0
    statement_s: float = 30.0
    pool_s: float = 10.0

    @property
    def connect_whole_s(self) -> int:
        """libpq's connect_timeout takes whole seconds (and 1 is its minimum)."""
        return max(2, math.ceil(self.connect_s))

    @property
    def call_s(self) -> float:
        """The client-side bound of one store call: a checkout then a statement, plus slack.

        ``statement_timeout`` needs a server that still answers; this bound also ends a
        call to a stalled server or a dead network.
        """
        return self.pool_s + self.statement_s + 1.0


class StoreConfig(BaseModel):
    """Store settings; the defaults give the embedded SQLite file under SYNTHORG_HOME."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str | None = Field(
        default=None,
        description="sqlite:///path, a plain file path, or postgresql://...; "
        "None for SYNTHORG_HOME/store.db.",
    )
    encryption_key: SecretStr | None = Field(
        default=None, description="Fernet key sealing conversation secrets at rest."
    )
    encryption_key_file: Path | None = Field(
        default=None, description="File holding the Fernet key (alternative to encryption_key)."
    )
    poll_interval_s: float = Field(
        default=0.2,
        gt=0,
        le=60,
        description="Live-tail re-read interval for writers this process cannot hear.",
    )
    pool_max_size: int = Field(
        default=10, ge=1, le=200, description="PostgreSQL connection pool size."
    )
    busy_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="SQLite: how long a write waits for another process's lock, then fails.",
    )
    connect_timeout_s: float = Field(
        default=5.0, gt=0, le=300, description="PostgreSQL: connect timeout."
    )
    statement_timeout_s: float = Field(
        default=30.0, gt=0, le=3600, description="PostgreSQL: statement_timeout of every call."
    )
    pool_timeout_s: float = Field(
        default=10.0, gt=0, le=3600, description="PostgreSQL: wait for a pooled connection."
    )
    run_lease_s: float = Field(
        default=30.0,
        ge=0.3,
        le=3600,
        description="A run's owner lease: renewed every third of it (and dead-owner sweeps "
        "run as often); a killed run's bearer is refused at most this long after its last "
        "renewal. Workers use [distributed] owner_lease_s instead (default: twice their "
        "heartbeat timeout).",
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> StoreConfig:
        if self.encryption_key is not None and self.encryption_key_file is not None:
            raise ValueError("set either encryption_key or encryption_key_file, not both")
        return self

    def resolved_url(self, home: Path | None = None) -> str:
        """The store location, defaulting to ``<home>/store.db``."""
        if self.url:
            return self.url
        return str((home or synthorg_home()) / STORE_FILE)

    def pg_timeouts(self) -> PgTimeouts:
        """The PostgreSQL bounds of this configuration."""
        return PgTimeouts(
            connect_s=self.connect_timeout_s,
            statement_s=self.statement_timeout_s,
            pool_s=self.pool_timeout_s,
        )

    def cipher(self) -> SecretCipher | None:
        """The secret cipher, or None when secrets are to be redacted."""
        if self.encryption_key is not None:
            return SecretCipher(self.encryption_key.get_secret_value())
        if self.encryption_key_file is not None:
            return SecretCipher.from_file(self.encryption_key_file.expanduser())
        return None


def describe(url: str) -> str:
    """The location without any password, for messages and logs."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}@{host}"
