"""ContainerConversation over an in-memory sandbox process: parsing, garbage, controls, teardown.

The real bwrap sandbox and SDK are exercised end to end in test_e2e.py; here the process is a
queue of lines so each edge (garbage, idle, stop, cancel, exit) is hit deterministically.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from synthorg.engine.openhands import (
    ContainerLaunch,
    ContainerRuntime,
    OpenHandsRunSpec,
    RuntimeNotice,
    RuntimeRecord,
)
from synthorg.engine.openhands.fake import action, confirmation_request, error, finished, status
from synthorg.sandbox.protocol import (
    ExitReason,
    ForwardedEndpoint,
    SandboxExit,
    SandboxProcess,
    SandboxRequest,
)

_END = None


class LineProcess:
    """A SandboxProcess whose stdout is a queue the test fills."""

    def __init__(self, returncode: int = 0) -> None:
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()
        self.sent: list[str] = []
        self._exit: SandboxExit | None = None
        self._returncode = returncode

    @property
    def exit(self) -> SandboxExit | None:
        return self._exit

    @property
    def stderr_tail(self) -> str:
        return "Traceback: boom"

    async def send_line(self, line: str) -> None:
        self.sent.append(line)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[str]:
        while (line := await self.lines.get()) is not None:
            yield line
        self._exit = SandboxExit(
            returncode=self._returncode, reason=ExitReason.COMPLETED, message="exited"
        )

    async def stop(self, grace_s: float = 0.0) -> SandboxExit:
        return self._exit or SandboxExit(returncode=-9, reason=ExitReason.STOPPED, message="x")


class MemorySandbox:
    def __init__(self, process: LineProcess) -> None:
        self.process = process
        self.requests: list[tuple[SandboxRequest, str]] = []
        self.torn_down = False

    @asynccontextmanager
    async def stream(
        self, request: SandboxRequest, first_line: str
    ) -> AsyncIterator[SandboxProcess]:
        self.requests.append((request, first_line))
        try:
            yield self.process
        finally:
            self.torn_down = True


def spec() -> OpenHandsRunSpec:
    return OpenHandsRunSpec(
        task_prompt="t",
        model="m",
        gateway_base_url="http://127.0.0.1:18080/v1",
        gateway_token="BEARER-XYZ",
        workspace_path="/workspace",
        persistence_dir="/state",
        conversation_id="conv-1",
        max_turns=3,
        project_id="p",
    )


def runtime(
    tmp_path: Path, process: LineProcess, idle: float | None = None
) -> tuple[ContainerRuntime, MemorySandbox]:
    sandbox = MemorySandbox(process)
    launch = ContainerLaunch(
        argv=["/venv/bin/python", "/rt/run_task.py"],
        workspace=tmp_path,
        state_dir=tmp_path / "state",
        read_only_binds=[Path("/venv")],
        endpoints=[
            ForwardedEndpoint(name="gateway", host_socket=tmp_path / "g.sock", sandbox_port=18080)
        ],
    )
    return ContainerRuntime(sandbox, launch, idle_timeout_s=idle), sandbox


def feed(process: LineProcess, *records: object) -> None:
    for record in records:
        process.lines.put_nowait(
            record if isinstance(record, str) or record is None else json.dumps(record)
        )


async def test_spec_first_line_request_and_natural_finish(tmp_path: Path) -> None:
    process = LineProcess()
    factory, sandbox = runtime(tmp_path, process)
    conversation = factory(spec())
    seen: list[RuntimeRecord] = []

    async def sink(record: RuntimeRecord) -> bool:
        seen.append(record)
        return True

    feed(
        process,
        status(),
        "garbage line with BEARER-XYZ",
        action("a", "terminal", 0.1, command="ls"),
        finished("ok", 0.1),
    )
    outcome = await conversation.run(sink)
    assert outcome.finished and outcome.final_message == "ok"
    request, first = sandbox.requests[0]
    assert json.loads(first)["conversation_id"] == "conv-1"
    assert request.limits.idle_timeout_s is None  # the loop's own idle limit applies
    assert request.state_dir == tmp_path / "state" and request.conversation_id == "conv-1"
    assert [r.kind for r in seen] == ["status", "garbage", "action", "finished"]
    bad = seen[1]
    assert isinstance(bad, RuntimeNotice) and "BEARER-XYZ" not in bad.text
    assert sandbox.torn_down


async def test_error_exit_reports_the_last_error(tmp_path: Path) -> None:
    process = LineProcess(returncode=1)
    factory, _sandbox = runtime(tmp_path, process)

    async def sink(record: RuntimeRecord) -> bool:
        return True

    feed(process, status(), error("model call failed", 0.0, code="error"), _END)
    outcome = await factory(spec()).run(sink)
    assert outcome.error == "model call failed" and outcome.exit_code == 1
    process2 = LineProcess(returncode=1)
    factory2, _ = runtime(tmp_path, process2)
    feed(process2, status(), _END)
    outcome2 = await factory2(spec()).run(sink)
    assert (
        outcome2.error and "without finishing" in outcome2.error and "Traceback" in outcome2.error
    )


async def test_sink_false_stops_and_tears_down(tmp_path: Path) -> None:
    process = LineProcess()
    factory, sandbox = runtime(tmp_path, process)
    feed(process, status(), action("a", "terminal", 0.1))

    async def sink(record: RuntimeRecord) -> bool:
        return record.kind != "action"

    outcome = await factory(spec()).run(sink)
    assert outcome.stopped and sandbox.torn_down


async def test_controls_are_written_and_stop_ends_a_silent_run(tmp_path: Path) -> None:
    process = LineProcess()
    factory, sandbox = runtime(tmp_path, process, idle=0.05)
    conversation = factory(spec())
    feed(process, status(), confirmation_request(0.0, ("a", "terminal", "HIGH")))

    async def sink(record: RuntimeRecord) -> bool:
        return True

    running = asyncio.create_task(conversation.run(sink))
    await asyncio.sleep(0.2)  # longer than the idle limit: a decision wait is not idleness
    assert not running.done()
    await conversation.send_control({"type": "confirm", "accept": ["a"], "reject": []})
    assert json.loads(process.sent[0]) == {"type": "confirm", "accept": ["a"], "reject": []}
    await conversation.stop()
    outcome = await running
    assert outcome.stopped and sandbox.torn_down


async def test_idle_limit_ends_the_run_with_an_error(tmp_path: Path) -> None:
    process = LineProcess()
    factory, sandbox = runtime(tmp_path, process, idle=0.05)
    feed(process, status())

    async def sink(record: RuntimeRecord) -> bool:
        return True

    outcome = await factory(spec()).run(sink)
    assert outcome.error_code == "idle_timeout" and sandbox.torn_down


async def test_cancellation_tears_down(tmp_path: Path) -> None:
    process = LineProcess()
    factory, sandbox = runtime(tmp_path, process)
    feed(process, status())

    async def sink(record: RuntimeRecord) -> bool:
        return True

    running = asyncio.create_task(factory(spec()).run(sink))
    await asyncio.sleep(0.02)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert sandbox.torn_down
