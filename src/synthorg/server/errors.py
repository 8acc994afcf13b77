"""HTTP mapping of SynthOrg errors: one error body, one status per error class."""

from __future__ import annotations

import math
import secrets
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from synthorg.errors import (
    BoundaryError,
    ConfigError,
    ConflictError,
    NotFoundError,
    SynthOrgError,
    UnavailableError,
    UsageError,
)
from synthorg.logging import get_logger
from synthorg.server.http_limits import allowed_methods
from synthorg.server.idempotency import IdempotencyKeyReused
from synthorg.service.repositories import RepositoryRefused

log = get_logger("synthorg.server")


class ErrorBody(BaseModel):
    """What every refused or failed request answers."""

    detail: str = Field(description="What went wrong and, where possible, what to do.")
    code: str = Field(description="Machine-readable class: not_found, conflict, unauthorized...")


_STATUS: tuple[tuple[type[SynthOrgError], int, str], ...] = (
    (NotFoundError, 404, "not_found"),
    (IdempotencyKeyReused, 409, "idempotency_key_reused"),
    (ConflictError, 409, "conflict"),
    (RepositoryRefused, 403, "forbidden"),
    (UsageError, 400, "bad_request"),
    (ConfigError, 400, "bad_request"),
    (BoundaryError, 502, "upstream_failure"),
    (UnavailableError, 503, "unavailable"),
)

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    422: "unprocessable",
    429: "too_many_requests",
    503: "unavailable",
}


def status_of(exc: SynthOrgError) -> tuple[int, str]:
    """The HTTP status and code for a SynthOrg error."""
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            return status, code
    return 500, "internal_error"


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` documenting the error statuses a route may answer; one that checks
    a key (401) may also answer 429 (too many failed keys from the caller's address)."""
    if 401 in statuses:
        statuses = (*statuses, 429)
    return {status: {"model": ErrorBody, "description": _HTTP_CODES[status]} for status in statuses}


def install_error_handlers(app: FastAPI) -> None:
    """Answer SynthOrg errors and HTTP exceptions with an ErrorBody."""

    async def synthorg_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, SynthOrgError)
        status, code = status_of(exc)
        detail = str(exc)
        if status >= 500 and not isinstance(exc, UnavailableError):
            # A failure of ours or of a boundary (git, the store): its text holds command
            # lines and server paths, so it goes to the log and the client gets a reference.
            # (An UnavailableError's message is written for the caller: it says what to do.)
            ref = secrets.token_hex(6)
            log.error("REQUEST_FAILED", path=request.url.path, error=detail, code=code, ref=ref)
            detail = f"the server could not complete the request (reference {ref} in its log)"
        return JSONResponse(ErrorBody(detail=detail, code=code).model_dump(), status_code=status)

    async def unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        ref = secrets.token_hex(6)
        log.exception("REQUEST_CRASHED", path=request.url.path, ref=ref)
        body = ErrorBody(
            detail=f"internal error (reference {ref} in the server log)", code="internal_error"
        )
        return JSONResponse(body.model_dump(), status_code=500)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _HTTP_CODES.get(exc.status_code, "error")
        body = ErrorBody(detail=str(exc.detail), code=code)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names only the first route matching the path; name them all.
            headers["Allow"] = ", ".join(allowed_methods(request.app.openapi, request.url.path))
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=headers)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        # FastAPI's own answer without what the client sent: an error's ``input`` (and the
        # ``ctx`` built from it) may be the whole body, an API key included, which must never
        # be echoed (into a log, a proxy's cache, a page). Where and what is wrong is enough.
        assert isinstance(exc, RequestValidationError)
        errors = [{k: e[k] for k in _VALIDATION_FIELDS if k in e} for e in exc.errors()]
        return JSONResponse({"detail": _finite(jsonable_encoder(errors))}, status_code=422)

    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(SynthOrgError, synthorg_error)
    app.add_exception_handler(Exception, unexpected_error)
    app.add_exception_handler(StarletteHTTPException, http_error)


_VALIDATION_FIELDS = ("type", "loc", "msg")
"""What a 422 says of each error (pydantic's ``input``, ``ctx`` and ``url`` are left out)."""


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float as its text (strict JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value
