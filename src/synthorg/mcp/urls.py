"""URL normal form (RFC 3986 section 6): what the allow-list matches is exactly what is sent.

Normalisation lower-cases scheme and host, drops the default port, decodes percent-encoded
unreserved characters (so ``%2e%2e`` becomes ``..``), upper-cases the remaining escapes, encodes
non-ASCII, and removes dot segments (RFC 3986 5.2.4). Shapes that servers are known to read
differently from this form are refused outright instead of being guessed at: backslashes,
encoded separators (``%2f``, ``%5c``), double-encoded escapes (``%252e``), NULs, ``..;``
segments, control characters, userinfo.

Hand-written on purpose (~100 lines): ``rfc3986`` does not decode unreserved escapes before
removing dot segments, and ``yarl``/``httpx`` each normalise differently from what they send;
here the request line is built from this one form, so there is no second parser to disagree.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

import idna

DEFAULT_PORTS = {"http": 80, "https": 443}
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Characters that may stay literal in a path or query (RFC 3986 pchar, '/' and '?').
_LITERAL = frozenset(_UNRESERVED | frozenset(b"!$&'()*+,;=:@/?"))
_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")
_DOUBLE_ESCAPE = re.compile(r"%25[0-9A-Fa-f]{2}")
_HOST = re.compile(
    r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$"
)
# Encoded '/', '\' and NUL: servers that decode them before resolving '..' see other paths.
_ENCODED_SEPARATOR = re.compile(r"%(?:2F|5C|00)", re.IGNORECASE)


class UrlError(ValueError):
    """A URL that cannot be normalised safely; the message says why."""


@dataclass(frozen=True, slots=True)
class NormalUrl:
    """A URL in normal form; ``str()`` is exactly what is requested."""

    scheme: str
    host: str
    """Lower-case, IDNA-encoded name or IP literal (IPv6 without brackets)."""
    port: int
    path: str
    query: str | None

    @property
    def target(self) -> str:
        """The request target: path and query."""
        return self.path if self.query is None else f"{self.path}?{self.query}"

    @property
    def authority(self) -> str:
        """host[:port] as sent in Host (the port only when it is not the scheme's default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def is_ip_literal(self) -> bool:
        """Whether the host is an IP address rather than a name to resolve."""
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}{self.target}"


def remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4, on an absolute path."""
    out: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    trailing = path.rsplit("/", 1)[-1] in (".", "..")
    return "/" + "/".join(out) + ("/" if trailing and out else "")


def _normalise_escapes(part: str, what: str) -> str:
    data = part.encode("utf-8")
    if _BAD_ESCAPE.search(data):
        raise UrlError(f"the {what} has a malformed percent-escape")

    def one(match: re.Match[bytes]) -> bytes:
        byte = int(match.group(1), 16)
        return bytes([byte]) if byte in _UNRESERVED else b"%" + match.group(1).upper()

    decoded = _ESCAPE.sub(one, data)
    return "".join(chr(b) if b in _LITERAL or b == 0x25 else f"%{b:02X}" for b in decoded)


def _host_of(parts: SplitResult) -> str:
    host = parts.hostname or ""
    if not host:
        raise UrlError("it has no host")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    host = host.rstrip(".") if host.count(".") and host.endswith(".") else host
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise UrlError(f"its host is not a valid name: {exc}") from exc
    host = host.lower()
    if not _HOST.match(host):
        raise UrlError(f"its host {host!r} is not a valid DNS name or IP address")
    return host


def normalise_url(raw: str) -> NormalUrl:
    """The normal form of an http(s) URL; UrlError naming the problem otherwise."""
    if any(ch <= " " or ch == "\x7f" for ch in raw) or "\\" in raw:
        raise UrlError("it contains whitespace, a control character or a backslash")
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise UrlError(f"it does not parse ({exc})") from exc
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise UrlError("only http and https URLs can be fetched")
    if "@" in parts.netloc:
        raise UrlError("it carries credentials (user@host)")
    host = _host_of(parts)
    path = _normalise_escapes(parts.path or "/", "path")
    if not path.startswith("/"):
        raise UrlError("its path is not absolute")
    if _ENCODED_SEPARATOR.search(path):
        raise UrlError("its path has an encoded '/', '\\' or NUL, which servers read differently")
    if _DOUBLE_ESCAPE.search(path):
        raise UrlError(
            "its path has a double-encoded escape (%25 then two hex digits, as in %252e), which "
            "a server that decodes twice reads as another path"
        )
    if any(seg.split(";", 1)[0] in (".", "..") and ";" in seg for seg in path.split("/")):
        raise UrlError("its path has a '..;' segment, which some servers read as '..'")
    query = None if not parts.query and "?" not in raw else _normalise_escapes(parts.query, "query")
    return NormalUrl(
        scheme=scheme,
        host=host,
        port=DEFAULT_PORTS[scheme] if port is None else port,
        path=remove_dot_segments(path),
        query=query,
    )
