"""The errors of the gateway's HTTP stack to upstreams: whether the request may have been sent."""

from __future__ import annotations

from synthorg.errors import BoundaryError


class UpstreamHttpError(BoundaryError):
    """The exchange with the upstream failed; ``sent`` says whether it may have got it."""

    sent = True


class ConnectFailed(UpstreamHttpError):
    """No connection could be made (or a proxy refused the tunnel): nothing was sent."""

    sent = False


class UpstreamBroken(UpstreamHttpError):
    """The upstream broke the protocol, the connection, or a size cap, after the request
    was (or may have been) written."""
