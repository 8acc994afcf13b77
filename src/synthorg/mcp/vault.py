"""The credential vault: per-project tokens from env or an encrypted file, never handed out."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from cryptography.fernet import Fernet, InvalidToken
from pydantic import SecretStr

from synthorg.errors import ConfigError
from synthorg.localsock import private_dir
from synthorg.mcp.config import McpConfig


class Cipher(Protocol):
    """Seals secrets at rest; the store's ``SecretCipher`` satisfies it structurally."""

    def encrypt(self, value: str) -> str:
        """The sealed form of ``value``."""
        ...

    def decrypt(self, sealed: str) -> str:
        """The plaintext of a sealed value; raises if the key is not the one it was sealed with."""
        ...


class FernetCipher:
    """A Cipher over one Fernet key (for a vault key file of its own)."""

    def __init__(self, key: bytes) -> None:
        try:
            self._fernet = Fernet(key.strip())
        except ValueError as exc:
            raise ConfigError(
                "the vault key is not a valid Fernet key (32 url-safe base64 bytes); "
                "delete the key file to have a new one generated"
            ) from exc

    def encrypt(self, value: str) -> str:
        """The Fernet token of ``value``."""
        return self._fernet.encrypt(value.encode()).decode("ascii")

    def decrypt(self, sealed: str) -> str:
        """The plaintext of a Fernet token (InvalidToken with another key)."""
        return self._fernet.decrypt(sealed.encode("ascii")).decode()


class CredentialKind(StrEnum):
    """Which credential of a project."""

    GIT = "git"
    FORGE = "forge"


class CredentialVault:
    """Holds credentials by (project, kind); only the tools inside this server read them."""

    def __init__(self, credentials: Mapping[tuple[str, CredentialKind], SecretStr] | None = None):
        self._items: dict[tuple[str, CredentialKind], SecretStr] = dict(credentials or {})

    def __repr__(self) -> str:
        return f"CredentialVault({len(self._items)} credential(s))"

    def put(self, project_id: str, kind: CredentialKind, value: str) -> None:
        """Store (or replace) one credential."""
        if not value:
            raise ConfigError(f"empty {kind} credential for project {project_id!r}")
        self._items[(project_id, kind)] = SecretStr(value)

    def get(self, project_id: str, kind: CredentialKind) -> SecretStr | None:
        """The credential, None when the project has none of that kind."""
        return self._items.get((project_id, kind))

    def secret_values(self) -> Iterator[str]:
        """Every secret held, for redaction only."""
        for value in self._items.values():
            yield value.get_secret_value()

    @classmethod
    def from_config(
        cls, config: McpConfig, environ: Mapping[str, str] | None = None
    ) -> CredentialVault:
        """Credentials named by env var in the config; a named but unset variable fails loud."""
        env = os.environ if environ is None else environ
        vault = cls()
        for project in config.projects:
            named = [(CredentialKind.GIT, project.git_token_env)]
            if project.forge is not None:
                named.append((CredentialKind.FORGE, project.forge.token_env))
            for kind, var in named:
                if var is None:
                    continue
                value = env.get(var)
                if not value:
                    raise ConfigError(
                        f"project {project.project_id!r}: environment variable {var} "
                        f"(its {kind} token) is not set; export it or remove it from the config"
                    )
                vault.put(project.project_id, kind, value)
        if config.vault_path is not None:
            if config.vault_key_path is None:
                raise ConfigError("vault_path is set but vault_key_path is not; name the key file")
            key = load_or_create_fernet_key(config.vault_key_path)
            vault.merge(cls.load(config.vault_path, FernetCipher(key)))
        return vault

    def merge(self, other: CredentialVault) -> None:
        """Take every credential of ``other`` (its values win)."""
        self._items.update(other._items)

    def save(self, path: Path, cipher: Cipher) -> None:
        """Write the vault encrypted (each value sealed by ``cipher``), 0600, atomically."""
        data = {
            f"{project}/{kind}": cipher.encrypt(value.get_secret_value())
            for (project, kind), value in self._items.items()
        }
        private_dir(path.parent)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path, cipher: Cipher) -> CredentialVault:
        """Read a vault written by ``save``; ConfigError if the file or key is wrong."""
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read credential vault {path}: {exc}") from exc
        vault = cls()
        for key, token in data.items():
            project, _, kind = key.rpartition("/")
            try:
                kind_ = CredentialKind(kind)
            except ValueError as exc:
                raise ConfigError(f"credential vault {path}: unknown entry {key!r}") from exc
            try:
                vault.put(project, kind_, cipher.decrypt(token))
            except (InvalidToken, ConfigError) as exc:
                raise ConfigError(
                    f"credential vault {path} does not decrypt with this key; "
                    "use the key file it was written with"
                ) from exc
        return vault


def load_or_create_fernet_key(path: Path) -> bytes:
    """The Fernet key at ``path``, generated (0600) when absent."""
    private_dir(path.parent)  # checked before it is read: a planted key opens the vault
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        key = Fernet.generate_key()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
        return key
