"""Secrets in base state: encrypted with a key, redacted without; never in clear on disk."""

from __future__ import annotations

import secrets

import pytest
from store_helpers import raw_saved_text, record

from synthorg.errors import ConfigError
from synthorg.store import REDACTED, SecretCipher, StoreConfig, open_store


def _plaintext() -> str:
    return f"sk-live-{secrets.token_hex(16)}"


async def test_without_key_secrets_are_redacted_and_unrecoverable(store_url: str) -> None:
    value = _plaintext()
    store = await open_store(store_url)
    try:
        rec = record(secrets={"api_key": value})
        await store.create_conversation(rec)
        assert (await store.get_conversation(rec.id)).secrets == {"api_key": REDACTED}
    finally:
        await store.close()
    assert value not in raw_saved_text(store_url)
    # not even a key configured later brings it back
    keyed = await open_store(store_url, cipher=SecretCipher(SecretCipher.generate_key()))
    try:
        assert (await keyed.get_conversation(rec.id)).secrets == {"api_key": REDACTED}
    finally:
        await keyed.close()


async def test_with_key_secrets_are_encrypted_and_recoverable(store_url: str) -> None:
    value = _plaintext()
    key = SecretCipher.generate_key()
    store = await open_store(StoreConfig(url=store_url, encryption_key=key))  # type: ignore[arg-type]
    try:
        rec = record(secrets={"api_key": value})
        await store.create_conversation(rec)
        assert (await store.get_conversation(rec.id)).secrets == {"api_key": value}
        await store.save_conversation(rec.model_copy(update={"runs": 2}))
    finally:
        await store.close()
    saved = raw_saved_text(store_url)
    assert value not in saved
    assert "fernet:" in saved
    again = await open_store(store_url, cipher=SecretCipher(key))
    try:
        assert (await again.get_conversation(rec.id)).secrets == {"api_key": value}
    finally:
        await again.close()
    keyless = await open_store(store_url)
    try:
        assert (await keyless.get_conversation(rec.id)).secrets == {"api_key": REDACTED}
    finally:
        await keyless.close()
    wrong = await open_store(store_url, cipher=SecretCipher(SecretCipher.generate_key()))
    try:
        with pytest.raises(ConfigError, match="cannot be decrypted"):
            await wrong.get_conversation(rec.id)
    finally:
        await wrong.close()


def test_key_from_file_and_bad_keys(tmp_path: pytest.TempPathFactory) -> None:
    from pathlib import Path

    key = SecretCipher.generate_key()
    key_file = Path(str(tmp_path)) / "store.key"
    key_file.write_text(key + "\n")
    cipher = StoreConfig(encryption_key_file=key_file).cipher()
    assert cipher is not None
    assert cipher.decrypt(SecretCipher(key).encrypt("v")) == "v"
    assert StoreConfig().cipher() is None
    with pytest.raises(ConfigError, match="not a valid Fernet key"):
        SecretCipher("short")
    with pytest.raises(ConfigError, match="cannot read"):
        SecretCipher.from_file(Path(str(tmp_path)) / "missing.key")
    with pytest.raises(ValueError, match="not both"):
        StoreConfig(encryption_key=key, encryption_key_file=key_file)  # type: ignore[arg-type]


async def test_saving_without_the_key_keeps_encrypted_secrets(store_url: str) -> None:
    """A keyless process (reconciliation, a CLI) re-saving a record must not destroy them."""
    value = _plaintext()
    key = SecretCipher.generate_key()
    keyed = await open_store(store_url, cipher=SecretCipher(key))
    rec = record(secrets={"api_key": value, "other": "x"})
    try:
        await keyed.create_conversation(rec)
    finally:
        await keyed.close()
    keyless = await open_store(store_url)
    try:
        seen = await keyless.get_conversation(rec.id)
        assert seen.secrets == {"api_key": REDACTED, "other": REDACTED}
        # one secret replaced with a new value (redacted, as there is no key), one kept
        changed = dict(seen.secrets, other="new")
        await keyless.save_conversation(seen.model_copy(update={"runs": 3, "secrets": changed}))
    finally:
        await keyless.close()
    again = await open_store(store_url, cipher=SecretCipher(key))
    try:
        after = await again.get_conversation(rec.id)
        assert after.runs == 3
        assert after.secrets == {"api_key": value, "other": REDACTED}
    finally:
        await again.close()


async def test_unreachable_postgres_is_a_clear_boundary_error() -> None:
    from synthorg.errors import BoundaryError

    with pytest.raises(BoundaryError, match="is the server running"):
        await open_store("postgresql://postgres:hunter2@127.0.0.1:1/test")
    try:
        await open_store("postgresql://postgres:hunter2@127.0.0.1:1/test")
    except BoundaryError as exc:
        assert "hunter2" not in str(exc)
