"""``synthorg run`` through a running ``synthorg serve``: find its local socket, talk to it.

The serve keeps pre-imported OpenHands sandboxes warm, so a one-shot run handed to it skips
the seconds of SDK import a fresh process pays. The client side of
``synthorg.server.local``: the same calls the terminal makes of its own run service and
store (create, start, wait, cancel, decide; a conversation, its last seq, its live tail),
over HTTP on the unix socket, so ``synthorg run`` follows either one the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, NoReturn

import httpcore
import httpx

from synthorg.errors import (
    BoundaryError,
    ConflictError,
    NotFoundError,
    SynthOrgError,
    UnavailableError,
    UsageError,
)
from synthorg.localsock import Found, peer_credentials, trusted_uids

if TYPE_CHECKING:
    from synthorg.domain import ConversationRecord, ExecutionResult, StoredEvent, Task
    from synthorg.engine.control import Decision
    from synthorg.service.options import RunOptions

HELLO_TIMEOUT_S = 15.0
"""How long a serve may take to answer before the run goes on in this process (a serve
still starting answers once its restart reconciliation is done)."""
_TIMEOUT = httpx.Timeout(30.0)
_UNBOUNDED = httpx.Timeout(30.0, read=None)  # waiting for a run's end, following its log


class LocalServe:
    """The local socket's calls, shaped as the run service and the store the CLI uses."""

    def __init__(self, client: httpx.AsyncClient, found: Found) -> None:
        self._client = client
        self.found = found
        self._ended: dict[str, tuple[ConversationRecord, int]] = {}
        """What ``wait`` brought with a run's result: the conversation and its last seq as
        they were at the run's end (a stopping serve may be gone a moment later)."""

    @classmethod
    def client(cls, found: Found) -> httpx.AsyncClient:
        """An HTTP client on the socket (close it after). Every connection it opens is
        checked with SO_PEERCRED to reach the serve ``found`` names: the path is resolved
        again at each connect, and whoever can swap a directory on it in between (a
        symlinked data dir) must not get the run."""
        return httpx.AsyncClient(
            transport=_PeerCheckedTransport(found), base_url="http://serve", timeout=_TIMEOUT
        )

    async def hello(self) -> dict[str, Any]:
        """The serve's pid and sandbox backend (waits for a starting serve, bounded)."""
        reply: dict[str, Any] = await self._call(
            "GET", "/v1/hello", limits=httpx.Timeout(HELLO_TIMEOUT_S)
        )
        return reply

    # -- the run service's part -----------------------------------------------------------
    async def create(self, task: Task, options: RunOptions) -> ConversationRecord:
        """Create the conversation on the serve (not started)."""
        from synthorg.domain import ConversationRecord

        body = {"task": task.model_dump(mode="json"), "options": options.model_dump(mode="json")}
        return ConversationRecord.model_validate(
            await self._call("POST", "/v1/conversations", json=body)
        )

    async def start(self, conversation_id: str, *, message: str | None = None) -> None:
        """Start (or continue) its run on the serve."""
        await self._call(
            "POST", f"/v1/conversations/{conversation_id}/start", json={"message": message}
        )

    async def wait(self, conversation_id: str) -> ExecutionResult | None:
        """The run's result, once it has ended on the serve."""
        from synthorg.domain import ConversationRecord, ExecutionResult

        try:
            reply = await self._call(
                "POST", f"/v1/conversations/{conversation_id}/wait", limits=_UNBOUNDED
            )
        except NotFoundError:
            return None
        record = ConversationRecord.model_validate(reply["record"])
        self._ended[conversation_id] = (record, int(reply["last_seq"]))
        return ExecutionResult.model_validate(reply["result"])

    async def cancel(self, conversation_id: str, *, by: str) -> None:
        """Cancel the run on the serve."""
        await self._call("POST", f"/v1/conversations/{conversation_id}/cancel", json={"by": by})

    async def decide(self, conversation_id: str, decision: Decision) -> None:
        """Deliver a confirmation decision."""
        body = {
            "accepted": sorted(decision.accepted),
            "rejected": sorted(decision.rejected),
            "approver": decision.approver,
            "reason": decision.reason,
        }
        await self._call("POST", f"/v1/conversations/{conversation_id}/decide", json=body)

    # -- the store's part -----------------------------------------------------------------
    async def get_conversation(self, conversation_id: str) -> ConversationRecord:
        """The conversation as the serve's store has it (without secrets)."""
        from synthorg.domain import ConversationRecord

        if conversation_id in self._ended:
            return self._ended[conversation_id][0]
        reply = await self._call("GET", f"/v1/conversations/{conversation_id}")
        return ConversationRecord.model_validate(reply)

    async def last_seq(self, conversation_id: str) -> int:
        """The seq of its last event."""
        if conversation_id in self._ended:
            return self._ended[conversation_id][1]
        reply = await self._call("GET", f"/v1/conversations/{conversation_id}/last-seq")
        return int(reply["seq"])

    async def tail(self, conversation_id: str, *, after: int = 0) -> AsyncIterator[StoredEvent]:
        """Every event with seq > after, then live ones, as the serve appends them."""
        from synthorg.domain import StoredEvent

        url = f"/v1/conversations/{conversation_id}/events"
        try:
            async with self._client.stream(
                "GET", url, params={"after": after}, timeout=_UNBOUNDED
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                    _raise(response)
                async for line in response.aiter_lines():
                    if line:
                        yield StoredEvent.model_validate_json(line)
        except httpx.HTTPError as exc:
            raise self._gone(exc) from exc

    async def _call(
        self, method: str, url: str, *, json: Any = None, limits: httpx.Timeout = _TIMEOUT
    ) -> Any:
        try:
            response = await self._client.request(method, url, json=json, timeout=limits)
        except httpx.HTTPError as exc:
            raise self._gone(exc) from exc
        if response.status_code >= 400:
            _raise(response)
        return response.json() if response.content else None

    def _gone(self, exc: httpx.HTTPError) -> BoundaryError:
        if isinstance(exc, httpx.TimeoutException):
            return BoundaryError(f"serve pid {self.found.peer.pid} did not answer in time")
        return BoundaryError(
            f"lost serve pid {self.found.peer.pid} ({type(exc).__name__}: {exc}); the "
            "conversation is resumable with --resume once a serve or this terminal takes it over"
        )


# httpcore's errors as httpx's, most specific first (httpx maps them the same way, privately).
_HTTPX_ERROR: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


def _as_httpx(exc: Exception, request: httpx.Request) -> Exception:
    for theirs, ours in _HTTPX_ERROR:
        if isinstance(exc, theirs):
            return ours(str(exc), request=request)
    return exc


class _PeerCheckedTransport(httpx.AsyncBaseTransport):
    """httpx's transport boundary over an httpcore pool whose every connection is checked.

    httpx's own transport takes no network backend, so the pool is ours: one connection
    pool on the socket with ``_PeerChecked`` as its backend, and httpcore's errors mapped to
    httpx's so callers handle one error family."""

    def __init__(self, found: Found) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            uds=str(found.path), network_backend=_PeerChecked(found)
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core)
        except Exception as exc:
            raise _as_httpx(exc, request) from exc
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response, request),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


class _Body(httpx.AsyncByteStream):
    """A response body read from httpcore, its errors mapped to httpx's."""

    def __init__(self, response: httpcore.Response, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_stream():
                yield chunk
        except Exception as exc:
            raise _as_httpx(exc, self._request) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


class _PeerChecked(httpcore.AsyncNetworkBackend):
    """httpcore's backend, refusing a unix-socket peer that is not the probed serve."""

    def __init__(self, found: Found) -> None:
        self._found = found
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the local serve is reached on its unix socket only")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(path, timeout, socket_options)
        sock = stream.get_extra_info("socket")
        pid, uid, _ = peer_credentials(sock) if sock is not None else (-1, -1, -1)
        want = self._found.peer.pid
        if uid not in trusted_uids() or pid != want:
            await stream.aclose()
            raise httpcore.ConnectError(
                f"{path} now leads to pid {pid} of uid {uid}, not the serve pid {want} "
                "that answered there: refused"
            )
        return stream

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


_ERRORS: dict[str, type[SynthOrgError]] = {
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "bad_request": UsageError,
    "unprocessable": UsageError,
    "unavailable": UnavailableError,
}


def _raise(response: httpx.Response) -> NoReturn:
    """The serve's error body as the error the service would have raised in-process."""
    from synthorg.service.repositories import RepositoryRefused

    try:
        body = response.json()
        code, detail = str(body.get("code")), str(body.get("detail"))
    except ValueError:
        code, detail = "", response.text[:500]
    if code == "forbidden":
        raise RepositoryRefused(detail)
    raise _ERRORS.get(code, BoundaryError)(detail or f"HTTP {response.status_code}")
