"""Host side of the toolbox: one long-lived sandbox per run executing the native tools."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Literal, Self

from pydantic import BaseModel, Field

from synthorg.sandbox.errors import SandboxIOError, ToolboxError
from synthorg.sandbox.protocol import SandboxExit, SandboxProcess, SandboxRequest, SandboxStreamer

EditCommand = Literal["view", "create", "str_replace", "insert", "undo_edit"]
_READY_TIMEOUT_S = 30.0
_REPLY_MARGIN_S = 10.0
_STDERR_SHOWN = 2000  # the end of bwrap's (or the toolbox's) stderr in an error


def _said(why: str, ended: SandboxExit | None) -> str:
    """``why`` with what the sandbox wrote on stderr before it ended (bwrap's own error once
    the sandbox was set up: an exec that failed, a mount it lost; a toolbox traceback)."""
    tail = ended.stderr_tail.strip()[-_STDERR_SHOWN:] if ended is not None else ""
    return f"{why}; stderr: {tail}" if tail else why


class CommandResult(BaseModel):
    """Outcome of one shell command run in the sandbox."""

    exit_code: int | None = Field(description="Exit status; None when it timed out.")
    output: str = Field(description="stdout+stderr interleaved; head and tail when truncated.")
    truncated: bool = Field(description="True when output exceeded max_output bytes.")
    timed_out: bool = Field(description="True when the timeout killed its process group.")
    duration_s: float = Field(description="Wall time of the command.")


class EditResult(BaseModel):
    """Outcome of one file-editor operation in the sandbox."""

    ok: bool = Field(description="True when the edit (or view) succeeded.")
    output: str = Field(default="", description="View text or a snippet of the edited region.")
    error: str | None = Field(default=None, description="Why it was refused, for the model.")


class ToolboxClient:
    """Starts synthorg.sandbox.toolbox in a sandbox and calls it; use as `async with`."""

    def __init__(self, streamer: SandboxStreamer, request: SandboxRequest) -> None:
        self._streamer = streamer
        self._request = request.model_copy(update={"argv": streamer.toolbox_argv()})
        self._workspace = streamer.workspace_path_inside(request)
        self._cm: AbstractAsyncContextManager[SandboxProcess] | None = None
        self._process: SandboxProcess | None = None
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._reader: asyncio.Task[None] | None = None
        self._ended: str | None = None

    @property
    def workspace(self) -> str:
        """The workspace path as the toolbox (and the model's commands) see it."""
        return self._workspace

    @property
    def exit(self) -> SandboxExit | None:
        """How the toolbox's sandbox ended, once it has."""
        return None if self._process is None else self._process.exit

    async def __aenter__(self) -> Self:
        config = json.dumps({"workspace": self._workspace})
        self._cm = self._streamer.stream(self._request, config)
        self._process = await self._cm.__aenter__()
        ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending["None"] = ready
        self._reader = asyncio.create_task(self._read(self._process))
        try:
            await asyncio.wait_for(ready, _READY_TIMEOUT_S)
            self._pending.pop("None", None)
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            if isinstance(exc, TimeoutError):
                raise ToolboxError(f"toolbox not ready in {_READY_TIMEOUT_S}s") from exc
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._cm is None:
            return
        cm, self._cm = self._cm, None
        try:
            if self._process is not None and exc is None:
                await self._process.stop(grace_s=1.0)  # stdin EOF ends the toolbox cleanly
            await cm.__aexit__(exc_type, exc, tb)
        finally:
            if self._reader is not None:
                self._reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._reader
            self._fail_pending("the toolbox was shut down")

    async def run(
        self, command: str, timeout_s: float = 120.0, max_output: int = 100_000
    ) -> CommandResult:
        """Run `bash -c command` in the workspace; the timeout kills its process group."""
        reply = await self._call(
            {"op": "run", "command": command, "timeout_s": timeout_s, "max_output": max_output},
            timeout_s + _REPLY_MARGIN_S,
        )
        if not reply.get("ok"):
            raise ToolboxError(f"toolbox could not run the command: {reply.get('error')}")
        return CommandResult.model_validate(
            {k: reply[k] for k in CommandResult.model_fields if k in reply}
        )

    async def edit(
        self,
        command: EditCommand,
        path: str,
        *,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
    ) -> EditResult:
        """One file-editor operation; refusals come back as ok=False with an error."""
        args: dict[str, Any] = {"op": command, "path": path}
        extra = {
            "file_text": file_text,
            "old_str": old_str,
            "new_str": new_str,
            "insert_line": insert_line,
            "view_range": view_range,
        }
        args.update({k: v for k, v in extra.items() if v is not None})
        if command == "str_replace":
            args.setdefault("new_str", "")
        reply = await self._call(args, _REPLY_MARGIN_S * 3)
        return EditResult(
            ok=bool(reply.get("ok")), output=reply.get("output", ""), error=reply.get("error")
        )

    async def _call(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._process is None or self._ended is not None:
            raise ToolboxError(f"the toolbox is not running: {self._ended or 'not started'}")
        rid = str(next(self._ids))
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            await self._process.send_line(json.dumps({"id": rid, **request}))
            return await asyncio.wait_for(future, timeout_s)
        except SandboxIOError as exc:
            raise ToolboxError(f"the toolbox stopped: {self._ended or exc}") from exc
        except TimeoutError as exc:
            raise ToolboxError(f"the toolbox did not answer within {timeout_s}s") from exc
        finally:
            self._pending.pop(rid, None)

    async def _read(self, process: SandboxProcess) -> None:
        try:
            async for line in process:
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue  # stray output is not a reply; the toolbox never prints any
                future = self._pending.get(str(reply.get("id")))
                if future is not None and not future.done():
                    future.set_result(reply)
            ended = process.exit
            self._ended = _said(ended.message, ended) if ended else "its output ended"
        except SandboxIOError as exc:
            self._ended = _said(str(exc), process.exit)
        self._fail_pending(f"the toolbox ended: {self._ended}")

    def _fail_pending(self, why: str) -> None:
        self._ended = self._ended or why
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ToolboxError(why))
