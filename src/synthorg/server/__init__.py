"""The agent server: REST + WebSocket run control, history and live tail, confirmation, auth."""

from synthorg.server.app import create_app
from synthorg.server.auth import KeyStore, Principal, Role
from synthorg.server.config import ServerSettings
from synthorg.server.state import Authenticator

__all__ = ["Authenticator", "KeyStore", "Principal", "Role", "ServerSettings", "create_app"]
