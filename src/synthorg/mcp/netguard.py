"""Where a fetch may connect: a name is resolved once, its addresses checked, and that is pinned.

DNS answers are attacker-influenced (a listed name can point at 127.0.0.1, or change between a
check and the connection). So the address checked is the address dialled: the connection is
made to it by a network backend that ignores the name, while TLS SNI and the Host header still
carry the name.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable, Mapping
from typing import Protocol

import httpcore

from synthorg.mcp.allowlist import AllowEntry
from synthorg.mcp.errors import ToolFailedError, ToolRefusedError
from synthorg.mcp.urls import NormalUrl

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Resolver(Protocol):
    """Turns a host name into addresses."""

    async def resolve(self, host: str, port: int) -> list[str]:
        """Every address ``host`` resolves to (empty if none)."""
        ...


class SystemResolver:
    """The host's resolver (getaddrinfo), with a fixed name -> address table consulted first."""

    def __init__(self, fixed: Mapping[str, str] | None = None) -> None:
        self._fixed = dict(fixed or {})

    async def resolve(self, host: str, port: int) -> list[str]:
        """The fixed address of ``host``, else what getaddrinfo answers."""
        if host in self._fixed:
            return [self._fixed[host]]
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ToolFailedError(f"cannot resolve {host!r}: {exc.strerror}") from exc
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is globally routable (not loopback, private, link-local, ...)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


async def checked_address(url: NormalUrl, entry: AllowEntry, resolver: Resolver) -> str:
    """The one address to connect to for ``url``; refused if the name points somewhere private.

    An IP literal is taken as written: the allow-list entry that matched it names it exactly.
    A name must resolve only to public addresses unless its entry sets ``allow_private``.
    """
    if url.is_ip_literal:
        return url.host
    addresses = await resolver.resolve(url.host, url.port)
    if not addresses:
        raise ToolFailedError(f"{url.host!r} did not resolve to any address")
    parsed = [ipaddress.ip_address(a) for a in addresses]
    private = [str(a) for a in parsed if not is_public(a)]
    if private and not entry.allow_private:
        raise ToolRefusedError(
            f"{url.host!r} resolves to {', '.join(private)}, a loopback, link-local or private "
            "address; the allow-list entry must set allow_private for that"
        )
    return str(parsed[0])


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Dials one fixed address whatever host httpcore asks for (TLS still verifies the name)."""

    def __init__(self, address: str) -> None:
        self._address = address
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to the pinned address on ``port``."""
        return await self._inner.connect_tcp(
            self._address, port, timeout, local_address, socket_options
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Never: a fetch only goes over TCP."""
        raise ToolRefusedError("http_fetch does not connect to unix sockets")

    async def sleep(self, seconds: float) -> None:
        """Sleep (httpcore's retry backoff)."""
        await self._inner.sleep(seconds)
