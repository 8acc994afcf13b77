"""Operations routes: liveness, readiness, Prometheus metrics (no authentication)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from synthorg.server.state import State
from synthorg.server.wire import Health, Ready

router = APIRouter(tags=["operations"])

_READY_TIMEOUT_S = 2.0


@router.get("/health", response_model=Health)
async def health() -> Health:
    """The process serves requests."""
    return Health(status="ok")


@router.get("/ready", response_model=Ready, responses={503: {"model": Ready}})
async def ready(state: State) -> Ready | JSONResponse:
    """The store answers within two seconds."""
    try:
        async with asyncio.timeout(_READY_TIMEOUT_S):
            await state.store.count_conversations()
    except Exception as exc:  # a probe: any failure of the store means not ready
        body = Ready(ready=False, detail=f"store unavailable: {exc or type(exc).__name__}")
        return JSONResponse(body.model_dump(), status_code=503)
    return Ready(ready=True, detail="")


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
)
async def metrics(state: State) -> Response:
    """Prometheus metrics."""
    state.metrics.ws_open.set(state.subscribers.total())
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
