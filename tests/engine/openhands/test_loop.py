"""OpenHandsLoop against the deterministic fake conversation: every termination path."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from synthorg.domain import (
    ActionEvent,
    ConfirmationPolicy,
    ConversationEvent,
    ConversationStatus,
    MessageEvent,
    RiskLevel,
    StatusChangeEvent,
    StoredEvent,
    TerminationReason,
)
from synthorg.engine import Decision, LoopDependencies, LoopRegistry, MissingLoopDepsError
from synthorg.engine.no_op import is_no_op
from synthorg.engine.openhands import (
    OPENHANDS_FACTORIES,
    OpenHandsLoop,
    make_loop_with_callback,
    openhands_factory,
)
from synthorg.engine.openhands.fake import (
    WAIT,
    action,
    confirmation_request,
    error,
    finished,
    message,
    observation,
    status,
)

from .helpers import MODEL, Recorder, make_context, make_deps

WORK = [
    status("started", 0.0),
    message("Write notes.txt", 0.0, source="user"),
    action("a1", "file_editor", 0.0011, prompt=100, completion=10, command="create"),
    observation("a1", "File created", 0.0011),
    action("a2", "terminal", 0.0023, prompt=120, completion=12, command="cat notes.txt"),
    observation("a2", "hi\n[The command completed with exit code 0.]", 0.0023),
    action("a3", "finish", 0.0036, prompt=140, completion=14, message="done"),
    observation("a3", "done", 0.0036),
    finished("notes written", 0.0036),
]


async def test_completed_run_maps_events_turns_and_costs() -> None:
    recorder = Recorder()
    deps, _factory = make_deps(WORK)
    result = await OpenHandsLoop(deps).execute(make_context(recorder))

    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.final_message == "notes written"
    assert result.loop_type == "openhands"
    assert recorder.kinds() == [
        "message",
        "action",
        "observation",
        "action",
        "observation",
        "action",
        "observation",
    ]
    assert [t.tool_names for t in result.turns] == [("file_editor",), ("terminal",), ("finish",)]
    # Per-turn deltas of the running cost sum exactly to the run total.
    assert [t.cost_usd for t in result.turns] == [
        Decimal("0.0011"),
        Decimal("0.0012"),
        Decimal("0.0013"),
    ]
    assert sum(t.cost_usd for t in result.turns) == result.usage.cost_usd == Decimal("0.0036")
    assert result.usage.tokens_in == 360 and result.usage.tokens_out == 36
    assert result.tool_calls == 3
    actions = [e for e in recorder.events if isinstance(e, ActionEvent)]
    assert [a.usage.cost_usd for a in actions if a.usage] == [t.cost_usd for t in result.turns]
    terminal_obs = recorder.of("observation")[1]
    assert terminal_obs.exit_code == 0  # type: ignore[union-attr]
    user = recorder.events[0]
    assert isinstance(user, MessageEvent) and user.role == "user"


async def test_run_spec_binds_the_run() -> None:
    deps, factory = make_deps(WORK)
    await OpenHandsLoop(deps).execute(make_context(Recorder(), max_turns=7))
    (spec,) = factory.specs
    assert spec.conversation_id == "conv-1"  # the stable SynthOrg id: the same id resumes
    assert spec.gateway_base_url == "http://127.0.0.1:18080/v1"
    assert spec.mcp_base_url == "http://127.0.0.1:18081/mcp"
    assert spec.workspace_path == "/workspace" and spec.persistence_dir == "/state"
    assert spec.max_turns == 7 and spec.project_id == "proj-1" and spec.model == MODEL
    assert spec.input_cost_per_token == 2e-6
    assert spec.gateway_token == "host-bearer"  # the run's one bearer, never minted again
    assert "gateway_token" not in repr(spec)


_RUNNING = StatusChangeEvent(old=ConversationStatus.CREATED, new=ConversationStatus.RUNNING)
_FINISHED = StatusChangeEvent(old=ConversationStatus.RUNNING, new=ConversationStatus.FINISHED)
_RECONCILED = StatusChangeEvent(old=ConversationStatus.RUNNING, new=ConversationStatus.ERROR)


def _user(text: str) -> MessageEvent:
    return MessageEvent(role="user", text=text)


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        # A message sent after the run ended reaches the next run; steers during it do not.
        (
            [_RUNNING, _user("Write notes.txt"), _user("steer"), _FINISHED, _user("add a README")],
            ("add a README",),
        ),
        # A dead run never got an inactive status: its task was re-sent (issue 14.3).
        ([_RUNNING, _user("Write notes.txt"), _user("steer while running")], ()),
        # ... until the store reconciled it; what was sent after that is news.
        ([_RUNNING, _user("Write notes.txt"), _RECONCILED, _user("go on")], ("go on",)),
        # A run that started was given the messages before it.
        ([_RUNNING, _FINISHED, _user("a"), _RUNNING, _user("b")], ()),
    ],
)
async def test_a_resumed_run_gets_exactly_the_messages_no_run_has_seen(
    log: list[ConversationEvent], expected: tuple[str, ...]
) -> None:
    prior = [
        StoredEvent(conversation_id="conv-1", seq=i + 1, timestamp=datetime.now(UTC), event=e)
        for i, e in enumerate(log)
    ]
    deps, factory = make_deps(WORK, WORK)
    recorder = Recorder()
    await OpenHandsLoop(deps).execute(make_context(recorder, resumed=True, prior=prior))
    await OpenHandsLoop(deps).execute(make_context(Recorder(), prior=prior))
    resumed_spec, fresh_spec = factory.specs
    assert resumed_spec.resume_messages == expected
    assert fresh_spec.resume_messages == ()
    # Given once, in the spec: never forwarded again as a control line.
    assert factory.conversations[0].controls == []


async def test_resumed_run_subtracts_the_persisted_cost() -> None:
    script = [
        status("resumed", 0.5),
        action("b1", "terminal", 0.5008, prompt=50, completion=5, command="ls"),
        observation("b1", "x", 0.5008),
        action("b2", "finish", 0.5015, prompt=60, completion=6),
        finished("again", 0.5015),
    ]
    deps, _ = make_deps(script)
    result = await OpenHandsLoop(deps).execute(make_context(Recorder(), resumed=True))
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.usage.cost_usd == Decimal("0.0015") == sum(t.cost_usd for t in result.turns)
    assert result.resumed


async def test_a_finish_only_run_reports_its_turns_for_the_no_op_rule() -> None:
    """The loop completes; the runner's finish_run decides NO_OP from what the loop reports."""
    script = [status(), action("f", "finish", 0.001, prompt=10), finished("nothing", 0.001)]
    recorder = Recorder()
    deps, _ = make_deps(script)
    context = make_context(recorder)
    result = await OpenHandsLoop(deps).execute(context)
    assert result.termination_reason is TerminationReason.COMPLETED
    assert [t.tool_names for t in result.turns] == [("finish",)]
    assert is_no_op(
        context.task, result.termination_reason, changed=None, turns=result.turns, resumed=False
    )
    assert "finished" not in recorder.kinds()  # the runner logs the closing event


async def test_a_reply_without_finish_is_the_final_message() -> None:
    script = [status(), message("all good", 0.001, prompt=5), finished("", 0.001)]
    deps, _ = make_deps(script)
    result = await OpenHandsLoop(deps).execute(make_context(Recorder(), artifacts_expected=False))
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.final_message == "all good"  # the agent's reply when finish had none
    assert result.turns[0].tool_names == ()


@pytest.mark.parametrize(
    "reason",
    [
        TerminationReason.BUDGET_EXHAUSTED,
        TerminationReason.SHUTDOWN,
        TerminationReason.CANCELLED,
        TerminationReason.PAUSED,
    ],
)
async def test_sink_stop_reason_ends_the_run(reason: TerminationReason) -> None:
    def stop(event: ConversationEvent, seen: list[ConversationEvent]) -> TerminationReason | None:
        return reason if event.kind == "action" and event.action_id == "a2" else None  # type: ignore[union-attr]

    recorder = Recorder(stop_when=stop)
    deps, factory = make_deps(WORK)
    result = await OpenHandsLoop(deps).execute(make_context(recorder))
    assert result.termination_reason is reason
    assert recorder.kinds()[-1] == "action"  # nothing after the stop
    assert len(result.turns) == 2
    assert factory.conversations[0].torn_down and not factory.conversations[0].running


async def test_max_iterations_is_max_turns() -> None:
    script = [
        status(),
        action("a1", "terminal", 0.001, command="ls"),
        observation("a1", "x", 0.001),
        error("Agent reached maximum iterations limit (1).", 0.001, code="MaxIterationsReached"),
        error("run ended in status error", 0.001, code="error"),
    ]
    recorder = Recorder()
    deps, _ = make_deps(script)
    result = await OpenHandsLoop(deps).execute(make_context(recorder))
    # The last error decides; the SDK's iteration cap comes first, then the status line.
    assert result.termination_reason is TerminationReason.ERROR
    deps, _ = make_deps(script[:-1])
    result = await OpenHandsLoop(deps).execute(make_context(Recorder()))
    assert result.termination_reason is TerminationReason.MAX_TURNS


async def test_runtime_error_is_error_logged_once() -> None:
    script = [status(), error("litellm.APIConnectionError: boom", 0.0, code="error")]
    recorder = Recorder()
    deps, _ = make_deps(script)
    result = await OpenHandsLoop(deps).execute(make_context(recorder))
    assert result.termination_reason is TerminationReason.ERROR
    assert result.error == "litellm.APIConnectionError: boom"
    assert recorder.kinds() == ["error"]


@pytest.mark.parametrize(
    ("text", "code", "reason"),
    [
        # The gateway's code decides, whatever the wording.
        ("402 Payment Required", "cost_ceiling_reached", TerminationReason.BUDGET_EXHAUSTED),
        # A request refused at admission because it cannot fit what is left: out of budget too.
        ("402 Payment Required", "request_exceeds_budget", TerminationReason.BUDGET_EXHAUSTED),
        # Words alone (e.g. a model or a tool printing them) never make a budget kill.
        ("the cost ceiling was reached (cost_ceiling)", "error", TerminationReason.ERROR),
    ],
)
async def test_the_budget_kill_is_classified_by_the_gateway_code(
    text: str, code: str, reason: TerminationReason
) -> None:
    deps, _ = make_deps([status(), error(text, 0.0, code=code)])
    result = await OpenHandsLoop(deps).execute(make_context(Recorder()))
    assert result.termination_reason is reason


async def test_script_ending_without_finish_is_error() -> None:
    deps, _ = make_deps([status(), action("a", "terminal", 0.001, command="ls")])
    recorder = Recorder()
    result = await OpenHandsLoop(deps).execute(make_context(recorder))
    assert result.termination_reason is TerminationReason.ERROR
    assert recorder.events[-1].kind == "error"


async def test_garbage_lines_are_reported_and_the_run_goes_on() -> None:
    garbage = [
        "Traceback (most recent call last):",
        "[1, 2]",
        '{"kind": "telepathy"}',
        '{"kind": "action", "id": "x"}',
        '{"kind": "action", "id": "y", "tool_name": "terminal", "prompt_tokens": -1}',
    ]
    recorder = Recorder()
    deps, _ = make_deps([WORK[0], *garbage, *WORK[1:]])
    result = await OpenHandsLoop(deps).execute(make_context(recorder))
    assert result.termination_reason is TerminationReason.COMPLETED
    errors = recorder.of("error")
    assert len(errors) == len(garbage)
    assert all(e.code == "openhands_garbage_line" for e in errors)  # type: ignore[union-attr]
    assert "Traceback" in errors[0].message  # type: ignore[union-attr]


def _risky_script() -> list[object]:
    return [
        status(),
        action("r1", "terminal", 0.001, prompt=10, risk="HIGH", command="rm -rf build"),
        action("r2", "terminal", 0.001, risk="HIGH", command="rm -rf dist"),
        confirmation_request(0.001, ("r1", "terminal", "HIGH"), ("r2", "terminal", "HIGH")),
        WAIT,
        observation("r1", "removed", 0.001),
        observation("r2", "no", 0.001, rejected=True),
        action("f", "finish", 0.002, prompt=10),
        finished("cleaned", 0.002),
    ]


async def test_confirmation_request_then_decision_by_id() -> None:
    control_seen: dict[str, object] = {}
    deps, factory = make_deps(_risky_script())

    def watch(event: ConversationEvent, seen: list[ConversationEvent]) -> None:
        if event.kind == "confirmation_request":
            control_seen["pending"] = context.control.pending_actions
        if event.kind == "confirmation_decision":
            control_seen["controls_before"] = list(factory.conversations[0].controls)

    recorder = Recorder(stop_when=watch)  # type: ignore[arg-type]
    context = make_context(recorder, policy=ConfirmationPolicy.RISKY)

    async def approver() -> None:
        while not context.control.pending_actions:
            await asyncio.sleep(0.001)
        context.control.decide(
            Decision(
                accepted=frozenset({"r1"}),
                rejected=frozenset({"r2"}),
                approver="alice",
                reason="not dist",
            )
        )

    approving = asyncio.create_task(approver())
    result = await OpenHandsLoop(deps).execute(context)
    await approving
    assert result.termination_reason is TerminationReason.COMPLETED
    (request,) = recorder.of("confirmation_request")
    assert [(p.action_id, p.risk) for p in request.pending] == [  # type: ignore[union-attr]
        ("r1", RiskLevel.HIGH),
        ("r2", RiskLevel.HIGH),
    ]
    # Pending before the request was announced; the decision logged before it was forwarded.
    assert control_seen["pending"] == frozenset({"r1", "r2"})
    assert control_seen["controls_before"] == []
    (decision,) = recorder.of("confirmation_decision")
    assert decision.accepted == ("r1",) and decision.rejected == ("r2",)  # type: ignore[union-attr]
    assert decision.approver == "alice"  # type: ignore[union-attr]
    assert factory.conversations[0].controls == [
        {"type": "confirm", "accept": ["r1"], "reject": ["r2"], "reason": "not dist"}
    ]
    assert factory.specs[0].confirmation_policy == "risky" and factory.specs[0].security_analyzer
    rejected = recorder.of("observation")[1]
    assert rejected.is_error  # type: ignore[union-attr]
    assert [t.cost_usd for t in result.turns] == [Decimal("0.001"), Decimal(0), Decimal("0.001")]


async def test_stop_found_when_the_decision_is_logged_stops_the_run() -> None:
    def stop(event: ConversationEvent, seen: list[ConversationEvent]) -> TerminationReason | None:
        return TerminationReason.SHUTDOWN if event.kind == "confirmation_decision" else None

    recorder = Recorder(stop_when=stop)
    deps, factory = make_deps(_risky_script())
    context = make_context(recorder, policy=ConfirmationPolicy.RISKY)

    async def approver() -> None:
        while not context.control.pending_actions:
            await asyncio.sleep(0.001)
        ids = context.control.pending_actions
        context.control.decide(Decision(accepted=ids, rejected=frozenset(), approver="bob"))

    approving = asyncio.create_task(approver())
    result = await OpenHandsLoop(deps).execute(context)
    await approving
    assert result.termination_reason is TerminationReason.SHUTDOWN
    assert factory.conversations[0].controls == []  # never forwarded
    assert factory.conversations[0].torn_down


async def test_cancelling_the_awaiting_coroutine_tears_down_and_withdraws() -> None:
    deps, factory = make_deps(_risky_script())
    context = make_context(Recorder(), policy=ConfirmationPolicy.RISKY)
    task = asyncio.create_task(OpenHandsLoop(deps).execute(context))
    while not context.control.pending_actions:
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert factory.conversations[0].torn_down
    assert context.control.pending_actions == frozenset()
    assert context.control.forwarders == []


async def test_steering_and_pause_are_forwarded() -> None:
    script = [
        status(),
        action("a1", "terminal", 0.001, command="sleep 1"),
        WAIT,  # until the test says go on (via a confirm-less release below)
        message("STEER: wrap up", 0.001, source="user"),
        status("paused", 0.001),
    ]
    deps, factory = make_deps(script)
    recorder = Recorder()
    context = make_context(recorder)
    task = asyncio.create_task(OpenHandsLoop(deps).execute(context))
    while not factory.conversations or not factory.conversations[0].running:
        await asyncio.sleep(0.001)
    context.control.steer("STEER: wrap up")
    context.control.request_pause()
    conversation = factory.conversations[0]

    async def forwarded() -> None:  # both commands reached the runtime: the path ran
        while len(conversation.controls) < 2:
            await asyncio.sleep(0.001)

    await asyncio.wait_for(forwarded(), 30)
    assert conversation.controls == [
        {"type": "message", "text": "STEER: wrap up"},
        {"type": "pause"},
    ]
    assert context.control.drain_steering() == []  # delivered by the runtime, not re-queued
    await conversation.send_control({"type": "confirm"})  # releases the fake's WAIT
    result = await task
    assert result.termination_reason is TerminationReason.PAUSED
    # The runtime's echo of the steering message is not logged twice (the service logged it).
    assert not [e for e in recorder.of("message") if e.text == "STEER: wrap up"]  # type: ignore[union-attr]


def test_factory_requires_its_deps_and_registers() -> None:
    with pytest.raises(MissingLoopDepsError, match="OpenHandsLoopDeps"):
        openhands_factory(LoopDependencies())
    deps, _ = make_deps(WORK)
    registry = LoopRegistry(OPENHANDS_FACTORIES)
    loop = registry.build("openhands", LoopDependencies(deps))
    assert loop.get_loop_type() == "openhands"
    assert "openhands" in registry.known and "openhands" in registry.buildable
    assert isinstance(loop, OpenHandsLoop)
    assert make_loop_with_callback(loop, object()) is loop
