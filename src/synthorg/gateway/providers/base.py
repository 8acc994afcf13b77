"""The Provider protocol every upstream implements, and the error they raise."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol, runtime_checkable

from synthorg.errors import BoundaryError
from synthorg.gateway.wire import ChatChunk, ChatRequest, ChatResponse


class ProviderError(BoundaryError):
    """An upstream failed; ``status`` is the HTTP status the gateway answers with.

    ``type``/``code`` are the upstream's own when it sent them; ``headers`` the ones a caller
    needs to act on (``retry-after``). ``may_have_billed`` is False only when the upstream
    certainly generated nothing (it answered an error status, or was never reached): otherwise
    the request is billed its reservation.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 502,
        type_: str = "upstream_error",
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        may_have_billed: bool = True,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type_
        self.code = code
        self.headers = dict(headers or {})
        self.may_have_billed = may_have_billed


@runtime_checkable
class Provider(Protocol):
    """An upstream model API; requests name the upstream model id (no prefix)."""

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """One non-streaming completion."""
        ...

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """A streaming completion; the last chunk carries usage when the upstream reports it."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...
