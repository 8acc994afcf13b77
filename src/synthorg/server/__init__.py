"""The agent server: REST + WebSocket run control, history and live tail, confirmation, auth."""

from __future__ import annotations

from typing import TYPE_CHECKING

from synthorg.lazy import lazy_exports

if TYPE_CHECKING:
    from synthorg.server.app import create_app
    from synthorg.server.auth import KeyStore, Principal, Role
    from synthorg.server.config import ServerSettings
    from synthorg.server.state import Authenticator

_WHERE = {
    "create_app": "app",
    "KeyStore": "auth",
    "Principal": "auth",
    "Role": "auth",
    "ServerSettings": "config",
    "Authenticator": "state",
}

__all__ = [
    "Authenticator",
    "KeyStore",
    "Principal",
    "Role",
    "ServerSettings",
    "create_app",
]

__getattr__ = lazy_exports(__name__, _WHERE)
