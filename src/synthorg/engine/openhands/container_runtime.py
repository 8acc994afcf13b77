"""The real OpenHands runtime: the SDK entrypoint in the sandbox, driven over stdin/stdout.

The run spec goes in as one JSON line, the JSON event stream comes out line by line, and
control lines (pause, steering messages, decisions) follow on stdin. A line that is not a
valid record is reported as a ``garbage`` notice and the stream goes on. The sandbox is torn
down on every exit path: natural end, early stop, error, idle timeout, or cancellation of the
awaiting coroutine (the streamer's context manager kills the sandbox's pid namespace).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from synthorg.engine.openhands.conversation import (
    ControlCommand,
    EventSink,
    OpenHandsOutcome,
    OpenHandsRunSpec,
)
from synthorg.engine.openhands.errors import OpenHandsRuntimeError
from synthorg.engine.openhands.events import (
    OpenHandsEvent,
    RuntimeNotice,
    RuntimeRecord,
    garbage,
    parse_record,
)
from synthorg.errors import BoundaryError
from synthorg.logging import get_logger
from synthorg.sandbox.protocol import (
    ForwardedEndpoint,
    SandboxLimits,
    SandboxProcess,
    SandboxRequest,
)

_log = get_logger("synthorg.engine.openhands")
_EOF = object()
_IDLE = object()
_STDERR_IN_ERRORS = 1500


class SandboxRunner(Protocol):
    """The one thing the runtime needs of a sandbox backend (SandboxStreamer has it)."""

    def stream(
        self, request: SandboxRequest, first_line: str
    ) -> AbstractAsyncContextManager[SandboxProcess]:
        """Start the process, send first_line, tear everything down on exit."""
        ...


@dataclass(frozen=True)
class ContainerLaunch:
    """How the entrypoint is started for every run of one conversation."""

    argv: Sequence[str]
    """``<runtime venv>/bin/python <entrypoint>``."""
    workspace: Path
    """The host worktree (bound read-write)."""
    state_dir: Path
    """The host persistence dir of this conversation (bound read-write, outside the worktree)."""
    read_only_binds: Sequence[Path] = ()
    """Bound at their host path: the runtime venv's base interpreter."""
    runtime_binds: Sequence[Path] = ()
    """Shown at neutral paths (the sandbox's runtime_path_inside): the venv, the entrypoint's
    directory."""
    endpoints: Sequence[ForwardedEndpoint] = ()
    """The gateway and MCP sockets forwarded to 127.0.0.1 ports inside."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    """Resource caps; the idle limit is the loop's own (it pauses while a decision is awaited)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment inside."""


class ContainerRuntime:
    """A ConversationFactory: one sandboxed entrypoint process per run spec."""

    def __init__(
        self, sandbox: SandboxRunner, launch: ContainerLaunch, *, idle_timeout_s: float | None
    ) -> None:
        self._sandbox = sandbox
        self._launch = launch
        self._idle_timeout_s = idle_timeout_s

    def __call__(self, spec: OpenHandsRunSpec) -> ContainerConversation:
        request = sandbox_request(self._launch, spec.conversation_id)
        return ContainerConversation(self._sandbox, request, spec, self._idle_timeout_s)


def sandbox_request(launch: ContainerLaunch, conversation_id: str) -> SandboxRequest:
    """The sandbox request of one run of the entrypoint (and, with placeholders for the
    worktree, state dir and id, the launch a sandbox pool warms)."""
    return SandboxRequest(
        argv=list(launch.argv),
        workspace=launch.workspace,
        state_dir=launch.state_dir,
        read_only_binds=list(launch.read_only_binds),
        runtime_binds=list(launch.runtime_binds),
        env={"PYTHONDONTWRITEBYTECODE": "1", **launch.env},
        endpoints=list(launch.endpoints),
        # Waiting for a person is not idleness: the loop applies its own idle limit.
        limits=launch.limits.model_copy(update={"idle_timeout_s": None}),
        conversation_id=conversation_id,
    )


class ContainerConversation:
    """One run of the entrypoint in the sandbox (OpenHandsConversation)."""

    def __init__(
        self,
        sandbox: SandboxRunner,
        request: SandboxRequest,
        spec: OpenHandsRunSpec,
        idle_timeout_s: float | None,
    ) -> None:
        self._sandbox = sandbox
        self.request = request
        self._spec = spec
        self._idle_timeout_s = idle_timeout_s
        self._process: SandboxProcess | None = None
        self._stop = asyncio.Event()
        self._awaiting_decision = False
        self._last_error: OpenHandsEvent | None = None

    async def run(self, sink: EventSink) -> OpenHandsOutcome:
        async with self._sandbox.stream(self.request, self._spec.wire_line()) as process:
            self._process = process
            try:
                return await self._consume(process, sink)
            finally:
                self._process = None

    async def send_control(self, command: ControlCommand) -> None:
        process = self._process
        if process is None:
            return
        if command.get("type") == "confirm":
            self._awaiting_decision = False
        try:
            await process.send_line(json.dumps(dict(command)))
        except BoundaryError as exc:  # it ended meanwhile; its exit explains why
            _log.info("OPENHANDS_CONTROL_DROPPED", command=command.get("type"), error=str(exc))

    async def stop(self) -> None:
        self._stop.set()

    async def _consume(self, process: SandboxProcess, sink: EventSink) -> OpenHandsOutcome:
        lines = aiter(process)
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            while True:
                line = await self._next_line(lines, stopping)
                if line is None:
                    return OpenHandsOutcome(stopped=True)
                if line is _EOF:
                    return self._ended(process)
                if line is _IDLE:
                    return OpenHandsOutcome(
                        error=f"the OpenHands runtime wrote nothing for {self._idle_timeout_s}s "
                        "(idle limit); it was stopped",
                        error_code="idle_timeout",
                    )
                assert isinstance(line, str)
                record = self._parse(line)
                if not await sink(record):
                    return OpenHandsOutcome(stopped=True)
                ended = self._note(record)
                if ended is not None:
                    return ended
        finally:
            stopping.cancel()

    async def _next_line(self, lines: AsyncIterator[str], stopping: asyncio.Future[Any]) -> object:
        """The next line; _EOF at the end, _IDLE past the idle limit, None when stopped."""
        getter: asyncio.Future[Any] = asyncio.ensure_future(anext(lines, _EOF))
        timeout = None if self._awaiting_decision else self._idle_timeout_s
        try:
            done, _ = await asyncio.wait(
                {getter, stopping}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except BaseException:
            getter.cancel()
            raise
        if stopping in done:
            getter.cancel()
            return None
        if getter not in done:
            getter.cancel()
            return _IDLE
        return getter.result()

    def _parse(self, line: str) -> RuntimeRecord:
        try:
            return parse_record(line)
        except OpenHandsRuntimeError as exc:
            _log.warning("OPENHANDS_GARBAGE_LINE", reason=str(exc), line=line[:200])
            return garbage(self._redact(line), str(exc))

    def _note(self, record: RuntimeRecord) -> OpenHandsOutcome | None:
        """Track the run's state; the outcome when this record ends the run."""
        if isinstance(record, RuntimeNotice):
            if record.kind == "confirmation_request":
                self._awaiting_decision = True
            elif record.kind == "status" and record.summary == "paused":
                return OpenHandsOutcome(paused=True)
            return None
        if record.kind == "finished":
            # State is persisted as events happen; no need to wait for interpreter exit.
            return OpenHandsOutcome(finished=True, final_message=record.text)
        if record.kind == "error":
            self._last_error = record
        return None

    def _ended(self, process: SandboxProcess) -> OpenHandsOutcome:
        end = process.exit
        code = end.returncode if end is not None else None
        if self._last_error is not None:
            error = self._redact(self._last_error.text or "the runtime reported an error")
            return OpenHandsOutcome(error=error, error_code=self._last_error.code, exit_code=code)
        detail = end.message if end is not None else "its output ended"
        tail = ((end.stderr_tail if end is not None else "") or process.stderr_tail).strip()
        tail = tail[-_STDERR_IN_ERRORS:]
        error = f"the OpenHands runtime ended without finishing ({detail})"
        if tail:
            error += f"; stderr tail:\n{self._redact(tail)}"
        return OpenHandsOutcome(error=error, error_code="runtime_exit", exit_code=code)

    def _redact(self, text: str) -> str:
        return text.replace(self._spec.gateway_token, "[bearer redacted]")
