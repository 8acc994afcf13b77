"""URL allow-lists, matched on the normal form: scheme, host, port and a path prefix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from synthorg.mcp.urls import DEFAULT_PORTS, NormalUrl, UrlError, normalise_url


@dataclass(frozen=True, slots=True)
class AllowEntry:
    """One parsed entry."""

    scheme: str | None  # None: http or https
    host: str  # normal form; a leading "*." matches subdomains only
    port: int | None  # None: the scheme's default
    path: str  # normalised prefix, "" for any
    allow_private: bool  # the name may resolve to loopback/link-local/private addresses

    def matches(self, url: NormalUrl) -> bool:
        """Whether ``url`` (in normal form) falls under this entry."""
        if self.scheme is not None and self.scheme != url.scheme:
            return False
        if self.host.startswith("*."):
            if not url.host.endswith(self.host[1:]):
                return False
        elif url.host != self.host:
            return False
        if url.port != (self.port if self.port is not None else DEFAULT_PORTS[url.scheme]):
            return False
        prefix = self.path
        if not prefix or prefix == "/":
            return True
        # A prefix matches at a path boundary only: "/docs" allows "/docs/x", not "/docs-evil".
        path = url.path
        return path == prefix or path.startswith(prefix if prefix.endswith("/") else prefix + "/")


def parse_entry(entry: str, *, allow_private: bool = False) -> AllowEntry:
    """An entry from ``scheme://host[:port][/path]``, ``host[:port]`` or ``*.host``."""
    if "://" not in entry:
        host, _, port = entry.strip().lower().partition(":")
        wildcard = host.startswith("*.")
        try:
            normal = normalise_url(f"http://{host.removeprefix('*.')}/")
        except UrlError as exc:
            raise ValueError(f"allow-list entry {entry!r}: {exc}") from exc
        name = f"*.{normal.host}" if wildcard else normal.host
        return AllowEntry(None, name, int(port) if port else None, "", allow_private)
    try:
        normal = normalise_url(entry)
    except UrlError as exc:
        raise ValueError(
            f"allow-list entry {entry!r} must be http(s)://host[:port][/path]: {exc}"
        ) from exc
    path = "" if normal.path == "/" and not entry.split("://", 1)[1].count("/") else normal.path
    return AllowEntry(normal.scheme, normal.host, normal.port, path, allow_private)


class AllowList:
    """Decides whether a URL may be fetched, and under which entry."""

    def __init__(self, entries: Iterable[AllowEntry | str]) -> None:
        self._entries = tuple(e if isinstance(e, AllowEntry) else parse_entry(e) for e in entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def entry_for(self, url: NormalUrl) -> AllowEntry | None:
        """The first entry allowing ``url``; None when none does.

        An entry allowing private addresses wins over one that does not, so a name listed
        twice is judged by its most explicit entry.
        """
        found = [e for e in self._entries if e.matches(url)]
        return next((e for e in found if e.allow_private), found[0] if found else None)

    def allows(self, url: str) -> bool:
        """Whether ``url`` is on the list once normalised (unnormalisable URLs never are)."""
        try:
            return self.entry_for(normalise_url(url)) is not None
        except UrlError:
            return False
