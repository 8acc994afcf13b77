"""The local operator's channel of ``synthorg serve``: ``synthorg run`` hands its run here.

A small app on ``SYNTHORG_HOME/run/serve.sock`` (see ``synthorg.localsock`` for why whoever
connects is the local operator), apart from the public API: it is never on TCP, it needs no
API key, and it offers exactly what the terminal's run does with the run service — create,
start, follow the log, wait for the result, cancel, decide — so ``synthorg run`` follows a
run here as it follows one in its own process. The server's own rules (its loops and models,
its protected paths) apply as to any other client; its ``repository_roots`` do not, since
the caller could run on any path in its own process (``RepositoryPolicy.for_terminal``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from synthorg.domain import SEQ_MAX, ConversationRecord, ExecutionResult, Task
from synthorg.domain.ids import Identifier
from synthorg.errors import NotFoundError
from synthorg.localsock import private_dir, serve_socket, trusted_uids
from synthorg.logging import get_logger
from synthorg.server.errors import install_error_handlers
from synthorg.server.http_limits import HttpLimits
from synthorg.server.wire import (
    MESSAGE_MAX_CHARS,
    REPOSITORY_MAX_CHARS,
    REPOSITORY_PATTERN,
    DecisionRequest,
)
from synthorg.service.options import RunOptions
from synthorg.service.runs import LocalRunService
from synthorg.serving import serve_asgi
from synthorg.store import Store

log = get_logger("synthorg.server")

_READY_TIMEOUT_S = 60.0
_FOLLOWERS_S = 10.0
"""How long a stopping serve lets the terminals following its runs read how they ended."""
_NAME_MAX_CHARS = 200  # who cancels or decides: as long as an API key's principal may be
_SUN_PATH_MAX = 108  # sockaddr_un.sun_path on Linux, its terminating NUL included


class Hello(BaseModel):
    """Who serves this socket."""

    pid: int = Field(description="The serve process.")
    sandbox: str = Field(description="Its sandbox backend.")


class NewRun(BaseModel):
    """A conversation to create: the task and its options, as the terminal builds them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: Task = Field(description="The task.")
    options: RunOptions = Field(description="The run options.")

    @field_validator("task")
    @classmethod
    def _repository_as_the_api_takes_it(cls, task: Task) -> Task:
        # REST's rule (wire.CreateConversation): a relative path would be resolved against
        # the serve's working directory, not the client's; a NUL is no path at all.
        repository = task.repository
        if len(repository) > REPOSITORY_MAX_CHARS or not re.fullmatch(
            REPOSITORY_PATTERN, repository
        ):
            raise ValueError("repository must be an absolute path (no NUL) or project:NAME")
        return task


class Start(BaseModel):
    """Start (or continue) a run."""

    message: str | None = Field(
        default=None,
        min_length=1,
        max_length=MESSAGE_MAX_CHARS,
        description="A message for the agent first (as long as REST's messages may be).",
    )


class Cancel(BaseModel):
    """Cancel the active run."""

    by: str = Field(min_length=1, max_length=_NAME_MAX_CHARS, description="Who cancels.")


class DecisionBody(DecisionRequest):
    """A decision on pending actions, as the terminal makes it: REST's decision (ids, at
    least one, its reason's cap) and who decided, which REST takes from the key."""

    approver: str = Field(
        min_length=1, max_length=_NAME_MAX_CHARS, description="Who decided (recorded)."
    )


class Seq(BaseModel):
    """The last seq of a conversation's log."""

    seq: int = Field(description="0 for an empty log.")


class Ended(BaseModel):
    """How a run ended, with what the terminal shows after it (read once the run was over)."""

    result: ExecutionResult = Field(description="The run's result.")
    record: ConversationRecord = Field(description="The conversation after the run.")
    last_seq: int = Field(description="The last seq of its log after the run.")


class Followers:
    """Terminals following a run here (an open event stream, a wait for the result): a serve
    that is stopping lets them read how their runs ended before it goes (uvicorn ends the
    process right after the app's shutdown)."""

    def __init__(self) -> None:
        self._count = 0
        self._none = asyncio.Event()
        self._none.set()

    @contextlib.contextmanager
    def one(self) -> Iterator[None]:
        """Held while one terminal follows."""
        self._count += 1
        self._none.clear()
        try:
            yield
        finally:
            self._count -= 1
            if not self._count:
                self._none.set()

    async def gone(self) -> None:
        """Until every follower has let go (at most _FOLLOWERS_S)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_FOLLOWERS_S):
                await self._none.wait()


def _shown(record: ConversationRecord) -> ConversationRecord:
    return record.model_copy(update={"secrets": {}})  # secrets never leave the server


def create_local_app(
    service: LocalRunService,
    store: Store,
    *,
    sandbox: str,
    ready: asyncio.Event,
    followers: Followers,
    max_body_bytes: int,
) -> FastAPI:
    """The app behind the local socket. ``ready``: set once the server has started (restart
    reconciliation done); requests wait for it. ``followers``: who follows a run here.
    ``max_body_bytes``: the server's body cap, as on TCP."""
    # The caller is this host's terminal (the kernel vouched for its uid): it may name any
    # repository it could run in its own process, never the server's protected paths.
    terminal = service.repositories.for_terminal()
    app = FastAPI(title="SynthOrg local operator socket", openapi_url=None, docs_url=None)
    install_error_handlers(app)
    app.add_middleware(HttpLimits, openapi=app.openapi, max_body_bytes=max_body_bytes)

    async def started() -> None:
        async with asyncio.timeout(_READY_TIMEOUT_S):
            await ready.wait()

    @app.get("/v1/hello")
    async def hello() -> Hello:
        await started()
        return Hello(pid=os.getpid(), sandbox=sandbox)

    @app.post("/v1/conversations")
    async def create(body: NewRun) -> ConversationRecord:
        await started()
        return _shown(await service.create(body.task, body.options, repositories=terminal))

    @app.get("/v1/conversations/{conversation_id}")
    async def get(conversation_id: Identifier) -> ConversationRecord:
        return _shown(await store.get_conversation(conversation_id))

    @app.get("/v1/conversations/{conversation_id}/last-seq")
    async def last_seq(conversation_id: Identifier) -> Seq:
        return Seq(seq=await store.last_seq(conversation_id))

    @app.get("/v1/conversations/{conversation_id}/events")
    async def events(
        conversation_id: Identifier, after: Annotated[int, Query(ge=0, le=SEQ_MAX)] = 0
    ) -> StreamingResponse:
        await store.get_conversation(conversation_id)  # 404 before the stream starts

        async def lines() -> AsyncIterator[bytes]:
            # Ends when the client goes away (Starlette cancels the stream on disconnect).
            with followers.one():
                async for stored in store.tail(conversation_id, after=after):
                    yield stored.model_dump_json().encode() + b"\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.post("/v1/conversations/{conversation_id}/start", status_code=204)
    async def start(conversation_id: Identifier, body: Start) -> Response:
        await started()
        await service.start(conversation_id, message=body.message, repositories=terminal)
        return Response(status_code=204)

    @app.post("/v1/conversations/{conversation_id}/wait")
    async def wait(conversation_id: Identifier) -> Ended:
        with followers.one():
            result = await service.wait(conversation_id)
            if result is None:
                raise NotFoundError(f"no run of {conversation_id} was started by this server")
            record = _shown(await store.get_conversation(conversation_id))
            return Ended(
                result=result, record=record, last_seq=await store.last_seq(conversation_id)
            )

    @app.post("/v1/conversations/{conversation_id}/cancel", status_code=204)
    async def cancel(conversation_id: Identifier, body: Cancel) -> Response:
        await service.cancel(conversation_id, by=body.by)
        return Response(status_code=204)

    @app.post("/v1/conversations/{conversation_id}/decide", status_code=204)
    async def decide(conversation_id: Identifier, body: DecisionBody) -> Response:
        await service.decide(conversation_id, body.decision(body.approver))
        return Response(status_code=204)

    return app


@contextlib.asynccontextmanager
async def serve_local(
    home: Path, app: FastAPI, *, socket_path: Path | None = None
) -> AsyncIterator[Path | None]:
    """Serve ``app`` on the local socket of data dir ``home`` until the block exits.

    One serve per data dir owns the socket, by an exclusive lock held for its lifetime
    (released by the kernel however it dies). A second serve goes on without it (None,
    with a warning); so does one whose run dir is not this uid's, or whose socket path is
    too long for a unix socket. A socket file left by a
    killed serve is replaced: holding the lock proves nobody listens on it.
    """
    path = socket_path or serve_socket(home)
    try:
        if len(os.fsencode(path)) >= _SUN_PATH_MAX:  # bind() could never take it
            raise OSError(errno.ENAMETOOLONG, f"{path} is too long for a unix socket path")
        run_dir = private_dir(path.parent)
        lock = os.open(run_dir / "serve.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        if path.is_symlink() or (path.exists() and not path.is_socket()):
            os.close(lock)
            raise PermissionError(f"{path} exists and is not a socket: remove it")
    except OSError as exc:
        log.warning("SERVE_LOCAL_SOCKET_REFUSED", path=str(path), reason=str(exc))
        yield None
        return
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning(
                "SERVE_LOCAL_SOCKET_TAKEN",
                path=str(path),
                hint="another serve of this data dir owns it; `synthorg run` goes there",
            )
            yield None
            return
        async with serve_asgi(
            app, name="local", uds=path, host=None, port=None, peer_uids=trusted_uids()
        ) as listeners:
            log.info("SERVE_LOCAL_SOCKET", path=str(path))
            yield listeners.uds
    finally:
        os.close(lock)  # the lock goes with it
