"""URL allow-lists: a URL passes when an entry's scheme, host, port and path prefix match."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class _Entry:
    scheme: str | None  # None: http or https
    host: str  # lower-case; a leading "*." matches subdomains only
    port: int | None  # None: the scheme's default (or any default, for a bare host)
    path: str  # prefix, "" for any


def _port(parts: SplitResult) -> int:
    return parts.port or _DEFAULT_PORTS[parts.scheme]


def _parse_entry(entry: str) -> _Entry:
    if "://" not in entry:
        host, _, port = entry.strip().lower().partition(":")
        return _Entry(None, host, int(port) if port else None, "")
    parts = urlsplit(entry)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"allow-list entry {entry!r} must be http(s)://host[:port][/path]")
    return _Entry(parts.scheme, parts.hostname.lower(), _port(parts), parts.path)


class AllowList:
    """Decides whether a URL may be fetched."""

    def __init__(self, entries: tuple[str, ...]) -> None:
        self._entries = tuple(_parse_entry(e) for e in entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def allows(self, url: str) -> bool:
        """Whether ``url`` is on the list (credentials in a URL are never allowed)."""
        try:
            parts = urlsplit(url)
            port = _port(parts)
        except (ValueError, KeyError):
            return False
        host = (parts.hostname or "").lower()
        if not host or parts.username is not None or parts.password is not None:
            return False
        return any(
            self._match(entry, parts.scheme, host, port, parts.path) for entry in self._entries
        )

    @staticmethod
    def _match(entry: _Entry, scheme: str, host: str, port: int, path: str) -> bool:
        if entry.scheme is not None and entry.scheme != scheme:
            return False
        if entry.host.startswith("*."):
            if not host.endswith(entry.host[1:]):
                return False
        elif host != entry.host:
            return False
        expected_port = entry.port if entry.port is not None else _DEFAULT_PORTS[scheme]
        if port != expected_port:
            return False
        prefix = entry.path
        if not prefix or prefix == "/":
            return True
        # A prefix matches at a path boundary only: "/docs" allows "/docs/x", not "/docs-evil".
        return path == prefix or path.startswith(prefix if prefix.endswith("/") else prefix + "/")
