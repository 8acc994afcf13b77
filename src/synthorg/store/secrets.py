"""Secrets at rest: Fernet encryption with a configured key, redaction without one."""

from __future__ import annotations

from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from synthorg.errors import ConfigError

REDACTED = "[redacted]"
"""What a secret reads back as when it was saved without a key (or is read without one)."""

_SEALED_PREFIX = "fernet:"


class SecretCipher:
    """Encrypts and decrypts secret values with one Fernet key."""

    def __init__(self, key: str | bytes) -> None:
        raw = key.encode() if isinstance(key, str) else key
        try:
            self._fernet = Fernet(raw.strip())
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                "the store encryption key is not a valid Fernet key (32 url-safe base64 bytes); "
                "generate one with `python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'`"
            ) from exc

    @classmethod
    def from_file(cls, path: Path) -> SecretCipher:
        """Read the key from a file (the first line; surrounding whitespace ignored)."""
        try:
            text = path.read_text(encoding="ascii")
        except OSError as exc:
            raise ConfigError(f"cannot read the store key file {path}: {exc}") from exc
        return cls(text.strip())

    @staticmethod
    def generate_key() -> str:
        """A fresh random key, as text."""
        return Fernet.generate_key().decode("ascii")

    def encrypt(self, value: str) -> str:
        """The sealed form of ``value``."""
        return _SEALED_PREFIX + self._fernet.encrypt(value.encode()).decode("ascii")

    def decrypt(self, sealed: str) -> str:
        """The plaintext of a value produced by :meth:`encrypt`."""
        token = sealed.removeprefix(_SEALED_PREFIX).encode("ascii")
        try:
            return self._fernet.decrypt(token).decode()
        except InvalidToken as exc:
            raise ConfigError(
                "a stored secret cannot be decrypted with the configured store key; "
                "configure the key the secrets were saved with"
            ) from exc


def seal_secrets(values: dict[str, str], cipher: SecretCipher | None) -> dict[str, str]:
    """The form of ``values`` that may be written to disk: encrypted, or redacted."""
    if cipher is None:
        return dict.fromkeys(values, REDACTED)
    return {name: cipher.encrypt(value) for name, value in values.items()}


def open_secrets(stored: dict[str, str], cipher: SecretCipher | None) -> dict[str, str]:
    """Read back sealed values; anything not decryptable with our key reads as redacted."""
    opened: dict[str, str] = {}
    for name, value in stored.items():
        if cipher is not None and value.startswith(_SEALED_PREFIX):
            opened[name] = cipher.decrypt(value)
        else:
            opened[name] = REDACTED
    return opened
