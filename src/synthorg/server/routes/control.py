"""Run routes: messages, pause / interrupt / resume / cancel, confirmation decisions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from synthorg.domain.ids import Identifier
from synthorg.errors import ConflictError
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
    RollbackResult,
    SendMessage,
)
from synthorg.service import control as service_control

router = APIRouter(prefix="/api/conversations/{conversation_id}", tags=["runs"])


async def deliver_message(
    state: ServerState, conversation_id: str, text: str, principal: Principal, *, run: bool
) -> Delivery:
    """The service decides steer / start / record; the route counts it."""
    await state.conversation(conversation_id, principal)  # a scoped key's 404 comes first
    delivery = await service_control.deliver_message(
        state.service, state.store, conversation_id, text, run=run
    )
    if delivery != "recorded":
        state.metrics.commands.labels("steer" if delivery == "steered" else "start").inc()
    return delivery


async def control(
    state: ServerState, conversation_id: str, action: ControlAction, principal: Principal
) -> ControlResult:
    """Apply a control command through the run service."""
    await state.conversation(conversation_id, principal)  # a scoped key's 404 comes first
    status = await service_control.control_run(
        state.service, state.store, conversation_id, action, by=principal.name
    )
    state.metrics.commands.labels(action).inc()
    if action == "resume":
        state.metrics.commands.labels("start").inc()
    return ControlResult(conversation_id=conversation_id, action=action, status=status)


@router.post(
    "/messages",
    response_model=MessageResult,
    responses=responses(400, 401, 403, 404, 409, 503),
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
        responses=responses(401, 403, 404, 409, 503),
    )


for _action in ("pause", "interrupt", "resume", "cancel"):
    _control_route(_action)


@router.post(
    "/checkpoints/{n}/rollback",
    response_model=RollbackResult,
    responses=responses(400, 401, 403, 404, 409),
)
async def rollback_checkpoint(
    conversation_id: Identifier,
    n: Annotated[int, Path(ge=0, le=1_000_000_000, description="The checkpoint number.")],
    state: State,
    principal: Operator,
) -> RollbackResult:
    """Restore the worktree to checkpoint ``n``; refused (409) while a run is active."""
    await state.conversation(conversation_id, principal)  # a scoped key's 404 comes first
    await state.service.rollback(conversation_id, n, by=principal.name)
    state.metrics.commands.labels("rollback").inc()
    return RollbackResult(conversation_id=conversation_id, checkpoint=n, by=principal.name)


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
    "/confirmation",
    response_model=DecisionResult,
    responses=responses(400, 401, 403, 404, 409, 503),
)
async def decide(
    conversation_id: Identifier, body: DecisionRequest, state: State, principal: Approver
) -> DecisionResult:
    """Accept and/or reject pending actions by id; the caller is recorded as approver."""
    record = await state.conversation(conversation_id, principal)
    _, pending = await pending_actions(
        state.store, record, active=state.service.is_active(conversation_id)
    )
    waiting = {action.action_id for action in pending}
    stale = (set(body.accepted) | set(body.rejected)) - waiting
    if stale:
        raise ConflictError(
            f"action ids not pending in conversation {conversation_id}: {sorted(stale)} "
            "(already decided, stale, or of another conversation); GET the confirmation "
            "route for what is pending now"
        )
    # After the checks of what exists (a stale id is 409 either way): 400 for an id both
    # accepted and rejected.
    decision = body.decision(principal.name)
    await state.service.decide(conversation_id, decision)
    state.metrics.commands.labels("decide").inc()
    return DecisionResult(
        conversation_id=conversation_id,
        accepted=sorted(decision.accepted),
        rejected=sorted(decision.rejected),
        approver=principal.name,
    )
