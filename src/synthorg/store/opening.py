"""Open the store a URL or config names: SQLite or PostgreSQL, migrations applied."""

from __future__ import annotations

from pathlib import Path

from synthorg.errors import ConfigError
from synthorg.extras import install_hint
from synthorg.store.config import StoreConfig, describe
from synthorg.store.protocol import Store
from synthorg.store.secrets import SecretCipher

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_SQLITE_SCHEME = "sqlite://"


async def open_store(
    target: str | Path | StoreConfig | None = None, *, cipher: SecretCipher | None = None
) -> Store:
    """Open the store at ``target``: a StoreConfig, ``sqlite:///path``, a path, or a PostgreSQL URL.

    None means the default, ``SYNTHORG_HOME/store.db``. Migrations are applied on open;
    restart reconciliation is not (the server calls ``reconcile_after_restart`` itself).
    """
    config = (
        target
        if isinstance(target, StoreConfig)
        else StoreConfig(url=None if target is None else str(target))
    )
    cipher = cipher if cipher is not None else config.cipher()
    url = config.resolved_url()
    if not url.strip():
        raise ConfigError("the store url is empty: use sqlite:///path, a path, or postgresql://")
    if url.startswith(_POSTGRES_SCHEMES):
        try:
            from synthorg.store.postgres import PostgresStore
        except ModuleNotFoundError as exc:  # psycopg comes with the [postgres] extra
            if not (exc.name or "").startswith("psycopg"):
                raise
            raise ConfigError(
                f"store url {describe(url)!r} needs PostgreSQL support: {install_hint('postgres')}"
            ) from exc

        return await PostgresStore.open(
            url, cipher=cipher, max_size=config.pool_max_size, timeouts=config.pg_timeouts()
        )
    if url.startswith(_SQLITE_SCHEME):
        path = url[len(_SQLITE_SCHEME) :]
        if not path.startswith("/"):
            raise ConfigError(
                f"store url {url!r}: write sqlite:///relative/path or sqlite:////absolute/path"
            )
        path = path[1:]
    elif "://" in url:
        raise ConfigError(
            f"unsupported store url {describe(url)!r}: use sqlite:///path, a plain file path, "
            "or postgresql://user@host:port/database"
        )
    else:
        path = url
    if not path or path.endswith("/"):
        raise ConfigError(f"store url {describe(url)!r} does not name a database file")
    from synthorg.store.sqlite import SqliteStore

    return await SqliteStore.open(
        path,
        cipher=cipher,
        poll_interval=config.poll_interval_s,
        busy_timeout_s=config.busy_timeout_s,
    )
