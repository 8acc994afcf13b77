"""Backends for the store contract suite: a fresh SQLite file or PostgreSQL schema per module."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from synthorg.store import Store, open_store

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


def pg_url(schema: str) -> str:
    """A URL whose connections see only ``schema`` (isolates a test module)."""
    return f"{PG_ADMIN}?options=-csearch_path%3D{schema}"


@pytest.fixture(scope="module")
def pg_schema_url() -> Iterator[str]:
    """A fresh PostgreSQL schema, dropped afterwards."""
    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield pg_url(schema)
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where this module's store lives, once per backend."""
    if request.param == "sqlite":
        return str(Path(tmp_path_factory.mktemp("sqlite")) / "store.db")
    url: str = request.getfixturevalue("pg_schema_url")
    return url


@pytest.fixture
def backend(store_url: str) -> str:
    """``sqlite`` or ``postgres``."""
    return "postgres" if store_url.startswith("postgresql://") else "sqlite"


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An open store on this module's database."""
    opened = await open_store(store_url)
    try:
        yield opened
    finally:
        await opened.close()
