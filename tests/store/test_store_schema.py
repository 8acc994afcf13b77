"""Schema migrations: applied once, idempotent on reopen, newer databases refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.errors import ConfigError
from synthorg.store import StoreConfig, open_store
from synthorg.store.schema import LATEST_VERSION, pending


async def test_migrations_are_idempotent(store_url: str) -> None:
    first = await open_store(store_url)
    try:
        assert await first.schema_version() == LATEST_VERSION  # type: ignore[attr-defined]
        assert await first.migrate() == 0  # type: ignore[attr-defined]
    finally:
        await first.close()
    second = await open_store(store_url)  # reopening applies nothing and fails nothing
    try:
        assert await second.migrate() == 0  # type: ignore[attr-defined]
        assert await second.schema_version() == LATEST_VERSION  # type: ignore[attr-defined]
    finally:
        await second.close()


def test_a_newer_database_is_refused() -> None:
    with pytest.raises(ConfigError, match="newer than this SynthOrg"):
        pending(LATEST_VERSION + 1)
    assert pending(0)[0].version == 1
    assert pending(LATEST_VERSION) == ()


async def test_open_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTHORG_HOME", str(tmp_path / "home"))
    default = await open_store()
    await default.close()
    assert (tmp_path / "home" / "store.db").exists()
    assert StoreConfig().resolved_url() == str(tmp_path / "home" / "store.db")

    monkeypatch.chdir(tmp_path)
    relative = await open_store("sqlite:///rel.db")
    await relative.close()
    assert (tmp_path / "rel.db").exists()
    absolute = await open_store(f"sqlite:///{tmp_path}/abs.db")
    await absolute.close()
    assert (tmp_path / "abs.db").exists()

    for bad in ("mysql://u:pw@h/db", "sqlite://x.db", "sqlite:///", "  "):
        with pytest.raises(ConfigError) as info:
            await open_store(bad)
        assert "pw" not in str(info.value)
