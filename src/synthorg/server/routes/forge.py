"""Forge webhooks: the signed delivery is the credential, so no API key is asked for."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from synthorg.domain.ids import Identifier
from synthorg.server.state import State

router = APIRouter(prefix="/api/forge", tags=["forge"])


@router.post(
    "/{project}/webhook",
    status_code=202,
    responses={401: {"description": "bad or missing signature"}, 404: {"description": "unknown"}},
)
async def webhook(project: Identifier, request: Request, state: State) -> JSONResponse:
    """Accept a GitHub delivery (``X-GitHub-Event``, ``X-GitHub-Delivery``,
    ``X-Hub-Signature-256``); the work is queued and done in the background."""
    if state.forge is None:
        return JSONResponse({"detail": "this server has no forge webhooks"}, status_code=404)
    body = await request.body()  # raw bytes: the signature covers exactly these
    answer = await state.forge.intake.receive(project, request.headers, body)
    return JSONResponse(answer.body, status_code=answer.status)
