"""Authentication of the agent server: API keys, principals, roles."""

from synthorg.server.auth.keys import ApiKey, KeyStore
from synthorg.server.auth.principal import Principal, Role

__all__ = ["ApiKey", "KeyStore", "Principal", "Role"]
