"""Run routes: messages, pause / interrupt / resume / cancel, confirmation decisions."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from synthorg.domain import MessageEvent
from synthorg.domain.ids import Identifier
from synthorg.engine.control import Decision
from synthorg.errors import ConflictError, UsageError
from synthorg.server.auth import Principal
from synthorg.server.errors import responses
from synthorg.server.pending import pending_actions
from synthorg.server.state import (
    Approver,
    IdempotencyKey,
    Operator,
    ServerState,
    State,
    Viewer,
)
from synthorg.server.wire import (
    ControlAction,
    ControlResult,
    DecisionRequest,
    DecisionResult,
    Delivery,
    MessageResult,
    PendingView,
    SendMessage,
)

router = APIRouter(prefix="/api/conversations/{conversation_id}", tags=["runs"])


async def deliver_message(
    state: ServerState, conversation_id: str, text: str, principal: Principal, *, run: bool
) -> Delivery:
    """Steer the active run, or start a run with the message, or just record it."""
    await state.conversation(conversation_id, principal)  # 404 before anything else
    service = state.service
    if service.is_active(conversation_id):
        await service.steer(conversation_id, text)
        state.metrics.commands.labels("steer").inc()
        return "steered"
    if run:
        # The service refuses (409) a run that raced us to the start line.
        await state.start_run(conversation_id, text)
        return "started"
    await state.store.append(conversation_id, MessageEvent(role="user", text=text))
    return "recorded"


async def control(
    state: ServerState, conversation_id: str, action: ControlAction, principal: Principal
) -> ControlResult:
    """Apply a control command through the run service."""
    record = await state.conversation(conversation_id, principal)
    service = state.service
    active = service.is_active(conversation_id)
    if action == "resume":
        if active:
            raise ConflictError(f"conversation {conversation_id} is already running")
        await state.start_run(conversation_id)
    elif not active:
        raise ConflictError(
            f"conversation {conversation_id} has no active run to {action} "
            f"(it is {record.status.value})"
        )
    elif action == "pause":
        await service.pause(conversation_id, by=principal.name)
    elif action == "interrupt":
        await service.interrupt(conversation_id, by=principal.name)
    else:
        await service.cancel(conversation_id, by=principal.name)
    state.metrics.commands.labels(action).inc()
    record = await state.store.get_conversation(conversation_id)
    return ControlResult(conversation_id=conversation_id, action=action, status=record.status)


@router.post(
    "/messages", response_model=MessageResult, responses=responses(400, 401, 403, 404, 409)
)
async def send_message(
    conversation_id: Identifier,
    body: SendMessage,
    state: State,
    principal: Operator,
    idempotency_key: IdempotencyKey = None,
) -> MessageResult | JSONResponse:
    """Send a message: it steers a running conversation, else starts a run (``run: true``)."""

    async def deliver() -> MessageResult:
        delivery = await deliver_message(state, conversation_id, body.text, principal, run=body.run)
        return MessageResult(conversation_id=conversation_id, delivery=delivery)

    return await state.idempotency.once(
        caller=principal.key_id,
        route=f"messages/{conversation_id}",
        key=idempotency_key,
        request=body,
        status=200,
        call=deliver,
    )


def _control_route(action: ControlAction) -> None:
    async def endpoint(
        conversation_id: Identifier, state: State, principal: Operator
    ) -> ControlResult:
        return await control(state, conversation_id, action, principal)

    endpoint.__name__ = f"{action}_run"
    endpoint.__doc__ = {
        "pause": "Stop after the in-flight model call; the conversation stays resumable.",
        "interrupt": "Stop immediately; the conversation stays resumable.",
        "resume": "Start a run that continues the conversation.",
        "cancel": "Stop immediately; the conversation ends cancelled.",
    }[action]
    router.add_api_route(
        f"/{action}",
        endpoint,
        methods=["POST"],
        response_model=ControlResult,
        responses=responses(401, 403, 404, 409),
    )


for _action in ("pause", "interrupt", "resume", "cancel"):
    _control_route(_action)


@router.get("/confirmation", response_model=PendingView, responses=responses(401, 403, 404))
async def get_pending(conversation_id: Identifier, state: State, principal: Viewer) -> PendingView:
    """Actions waiting for a decision (id, tool, arguments summary, risk)."""
    record = await state.conversation(conversation_id, principal)
    seq, pending = await pending_actions(
        state.store, record, active=state.service.is_active(conversation_id)
    )
    return PendingView(
        conversation_id=conversation_id, status=record.status, request_seq=seq, pending=pending
    )


@router.post(
    "/confirmation", response_model=DecisionResult, responses=responses(400, 401, 403, 404, 409)
)
async def decide(
    conversation_id: Identifier, body: DecisionRequest, state: State, principal: Approver
) -> DecisionResult:
    """Accept and/or reject pending actions by id; the caller is recorded as approver."""
    accepted, rejected = set(body.accepted), set(body.rejected)
    if accepted & rejected:
        raise UsageError(f"action ids both accepted and rejected: {sorted(accepted & rejected)}")
    record = await state.conversation(conversation_id, principal)
    _, pending = await pending_actions(
        state.store, record, active=state.service.is_active(conversation_id)
    )
    waiting = {action.action_id for action in pending}
    stale = (accepted | rejected) - waiting
    if stale:
        raise ConflictError(
            f"action ids not pending in conversation {conversation_id}: {sorted(stale)} "
            "(already decided, stale, or of another conversation); GET the confirmation "
            "route for what is pending now"
        )
    decision = Decision(
        accepted=frozenset(accepted),
        rejected=frozenset(rejected),
        approver=principal.name,
        reason=body.reason,
    )
    await state.service.decide(conversation_id, decision)
    state.metrics.commands.labels("decide").inc()
    return DecisionResult(
        conversation_id=conversation_id,
        accepted=sorted(accepted),
        rejected=sorted(rejected),
        approver=principal.name,
    )
