"""Vault, redaction, allow-list and config rules, without servers."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synthorg.errors import ConfigError
from synthorg.mcp import CredentialKind, CredentialVault, McpConfig, load_mcp_config
from synthorg.mcp.allowlist import AllowList
from synthorg.mcp.redact import REDACTED, Redactor
from synthorg.mcp.vault import FernetCipher, load_or_create_fernet_key
from synthorg.store import SecretCipher

TOKEN = "ghs_0123456789abcdefABCDEF"


def _config(**project: object) -> McpConfig:
    return McpConfig.model_validate({"projects": [{"project_id": "p", **project}]})


# ---------------------------------------------------------------- vault


def test_vault_reads_named_env_vars_and_fails_loud_on_a_missing_one() -> None:
    config = _config(
        git_token_env="P_GIT", forge={"owner": "o", "repo": "r", "token_env": "P_FORGE"}
    )
    vault = CredentialVault.from_config(config, {"P_GIT": "g" * 8, "P_FORGE": "f" * 8})
    assert vault.get("p", CredentialKind.GIT).get_secret_value() == "g" * 8  # type: ignore[union-attr]
    assert vault.get("p", CredentialKind.FORGE).get_secret_value() == "f" * 8  # type: ignore[union-attr]
    assert vault.get("other", CredentialKind.GIT) is None
    with pytest.raises(ConfigError, match=r"P_FORGE .* is not set; export it"):
        CredentialVault.from_config(config, {"P_GIT": "g" * 8})


def test_vault_never_shows_a_secret_in_its_repr() -> None:
    vault = CredentialVault()
    vault.put("p", CredentialKind.GIT, TOKEN)
    assert TOKEN not in repr(vault)
    assert TOKEN not in repr(vault.get("p", CredentialKind.GIT))


@pytest.mark.parametrize("cipher_kind", ["fernet", "store"])
def test_vault_file_is_encrypted_at_rest_and_round_trips(tmp_path: Path, cipher_kind: str) -> None:
    key = load_or_create_fernet_key(tmp_path / "keys" / "vault.key")
    assert oct((tmp_path / "keys" / "vault.key").stat().st_mode & 0o777) == "0o600"
    # The store's own cipher satisfies the vault's Cipher protocol too.
    cipher = FernetCipher(key) if cipher_kind == "fernet" else SecretCipher(key)
    vault = CredentialVault()
    vault.put("p", CredentialKind.GIT, TOKEN)
    vault.put("p", CredentialKind.FORGE, TOKEN[::-1])
    path = tmp_path / "vault.json"
    vault.save(path, cipher)
    raw = path.read_text()
    assert TOKEN not in raw and TOKEN[::-1] not in raw
    assert base64.b64encode(TOKEN.encode()).decode()[:16] not in raw
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    loaded = CredentialVault.load(path, cipher)
    assert loaded.get("p", CredentialKind.GIT).get_secret_value() == TOKEN  # type: ignore[union-attr]
    assert sorted(json.loads(raw)) == ["p/forge", "p/git"]


def test_vault_file_with_another_key_fails_with_a_clear_message(tmp_path: Path) -> None:
    vault = CredentialVault()
    vault.put("p", CredentialKind.GIT, TOKEN)
    vault.save(tmp_path / "v.json", FernetCipher(load_or_create_fernet_key(tmp_path / "a.key")))
    other = FernetCipher(load_or_create_fernet_key(tmp_path / "b.key"))
    with pytest.raises(ConfigError, match="does not decrypt with this key"):
        CredentialVault.load(tmp_path / "v.json", other)


def test_config_vault_file_overrides_env_values(tmp_path: Path) -> None:
    key_path = tmp_path / "vault.key"
    stored = CredentialVault()
    stored.put("p", CredentialKind.GIT, "from-the-file")
    stored.save(tmp_path / "vault.json", FernetCipher(load_or_create_fernet_key(key_path)))
    config = McpConfig.model_validate(
        {
            "projects": [{"project_id": "p", "git_token_env": "P_GIT"}],
            "vault_path": str(tmp_path / "vault.json"),
            "vault_key_path": str(key_path),
        }
    )
    vault = CredentialVault.from_config(config, {"P_GIT": "from-the-env"})
    assert vault.get("p", CredentialKind.GIT).get_secret_value() == "from-the-file"  # type: ignore[union-attr]


# ---------------------------------------------------------------- redaction


@given(user=st.text(min_size=0, max_size=12).filter(lambda u: ":" not in u))
def test_basic_auth_forms_of_a_secret_are_redacted(user: str) -> None:
    redactor = Redactor([TOKEN])
    header = base64.b64encode(f"{user}:{TOKEN}".encode()).decode()
    out = redactor.text(f"Authorization: Basic {header}")
    assert REDACTED in out
    # What is left cannot give the secret back: at most a few characters around it.
    assert len(out) <= len("Authorization: Basic ") + len(header) - 8 + len(REDACTED)


def test_plain_and_url_quoted_secrets_are_redacted_in_nested_values() -> None:
    secret = "p@ss/word+1"
    redactor = Redactor([secret])
    value = {"url": f"https://u:{'p%40ss%2Fword%2B1'}@h/", "list": [secret, 3], secret: "k"}
    assert redactor.value(value) == {
        "url": f"https://u:{REDACTED}@h/",
        "list": [REDACTED, 3],
        REDACTED: "k",
    }


# ---------------------------------------------------------------- allow-list


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://docs.python.org/3/library/", True),
        ("https://docs.python.org/3", True),
        ("https://docs.python.org/2/", False),
        ("https://docs.python.org/35/", False),
        ("http://docs.python.org/3/", False),  # scheme pinned by the prefix entry
        ("https://docs.python.org:8443/3/", False),
        ("https://docs.python.org.evil.test/3/", False),
        ("https://user:pw@docs.python.org/3/", False),
        ("https://pypi.org/simple/", True),  # bare host: any path, http or https
        ("http://pypi.org/", True),
        ("https://files.pypi.org/x", False),
        ("https://a.example.com/x", True),  # "*.example.com"
        ("https://example.com/x", False),
        ("https://evilexample.com/x", False),
        ("ftp://pypi.org/", False),
        ("not a url", False),
    ],
)
def test_allow_list_matches_scheme_host_port_and_path_boundary(url: str, allowed: bool) -> None:
    allow = AllowList(("https://docs.python.org/3", "pypi.org", "*.example.com"))
    assert allow.allows(url) is allowed


def test_empty_allow_list_allows_nothing() -> None:
    allow = AllowList(())
    assert not allow and not allow.allows("https://pypi.org/")


# ---------------------------------------------------------------- config


def test_config_rejects_credentials_in_urls_and_duplicate_projects() -> None:
    with pytest.raises(ValueError, match="must not embed credentials"):
        _config(remote_url="https://x-access-token:abc@github.com/o/r.git")
    with pytest.raises(ValueError, match="configured twice"):
        McpConfig.model_validate({"projects": [{"project_id": "p"}, {"project_id": "p"}]})


def test_config_loads_from_toml_and_says_what_is_wrong(tmp_path: Path) -> None:
    good = tmp_path / "mcp.toml"
    good.write_text(
        '[[projects]]\nproject_id = "p"\nremote_url = "https://github.com/o/r.git"\n'
        '[projects.forge]\nowner = "o"\nrepo = "r"\n'
        'api_base_url = "https://ghe.example.com/api/v3/"\n'
    )
    config = load_mcp_config(good)
    project = config.project("p")
    assert project is not None and project.forge is not None
    assert project.forge.api_base_url == "https://ghe.example.com/api/v3"
    assert project.protected_branches == ("main", "master")
    bad = tmp_path / "bad.toml"
    bad.write_text('[[projects]]\nproject_id = "p"\nunknown = 1\n')
    with pytest.raises(ConfigError, match="unknown"):
        load_mcp_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_mcp_config(tmp_path / "missing.toml")
    assert os.path.exists(good)
