"""The console's own routes: the page, its assets, sign-in / sign-out, the repositories the
new-run form offers. Not part of the public API schema (they serve the browser only)."""

from __future__ import annotations

import asyncio
from importlib import resources
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from synthorg.server.auth import Principal
from synthorg.server.console.auth import (
    CSRF_HEADER,
    cookie_name,
    principal_of,
    request_cookie,
    session_of,
)
from synthorg.server.console.sessions import SESSION_TTL, Session, SessionStore, same_token
from synthorg.server.state import State, Viewer, client_address

router = APIRouter(include_in_schema=False)

STATIC = Path(str(resources.files("synthorg.web") / "static"))
_MAX_REPOSITORIES = 200


class SignIn(BaseModel):
    """The API key, in a JSON body (a cross-site form cannot send JSON without CORS)."""

    key: str = Field(min_length=1, max_length=512)


class SessionView(BaseModel):
    """Who is signed in, what they may do, and the CSRF token for mutating calls."""

    principal: str
    roles: list[str]
    projects: list[str]
    csrf: str


def _view(principal: Principal, session: Session) -> SessionView:
    return SessionView(
        principal=principal.name,
        roles=sorted(principal.roles),
        projects=sorted(principal.projects or ()),
        csrf=session.csrf,
    )


def _sessions(request: Request) -> SessionStore:
    store: SessionStore = request.app.state.console_sessions
    return store


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    return origin is None or origin in (f"http://{host}", f"https://{host}")


@router.get("/")
async def index() -> FileResponse:
    """The console page (one HTML file; everything else is an ES module or a stylesheet)."""
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


@router.post("/console/session", response_model=SessionView)
async def sign_in(request: Request, state: State, body: Annotated[SignIn, Body()]) -> JSONResponse:
    """Exchange an API key for a session cookie (HttpOnly, SameSite=Strict, Secure on TLS)."""
    if not _same_origin(request):
        raise HTTPException(403, "sign-in is accepted only from this server's own page")
    principal = state.check_key(body.key, client_address(request))
    if principal is None:
        raise HTTPException(401, "invalid or revoked API key")
    token, session = _sessions(request).create(principal.key_id)
    secure = request.url.scheme == "https"
    response = JSONResponse(_view(principal, session).model_dump())
    response.set_cookie(
        cookie_name(request.url.port, secure=secure),
        token,
        max_age=int(SESSION_TTL.total_seconds()),
        path="/",
        httponly=True,
        samesite="strict",
        secure=secure,
    )
    response.headers["Cache-Control"] = "no-store"
    return response


@router.get("/console/session", response_model=SessionView)
async def current_session(request: Request, state: State) -> JSONResponse:
    """The signed-in session (401 when there is none)."""
    found = session_of(request, _sessions(request))
    principal = None if found is None else principal_of(state.auth, found[1].key_id)
    if found is None or principal is None:
        raise HTTPException(401, "not signed in")
    body = _view(principal, found[1]).model_dump()
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


@router.delete("/console/session", status_code=204)
async def sign_out(request: Request) -> Response:
    """End the session (the CSRF token is required: a cross-site page cannot sign you out)."""
    sessions = _sessions(request)
    found = session_of(request, sessions)
    if found is not None:
        if not same_token(request.headers.get(CSRF_HEADER), found[1].csrf):
            raise HTTPException(403, f"missing or wrong {CSRF_HEADER} header for this session")
        sessions.delete(found[0])
    elif request_cookie(request) is None:
        raise HTTPException(401, "not signed in")
    secure = request.url.scheme == "https"
    response = Response(status_code=204)
    response.delete_cookie(
        cookie_name(request.url.port, secure=secure),
        path="/",
        httponly=True,
        samesite="strict",
        secure=secure,
    )
    return response


class Repositories(BaseModel):
    """Git repositories the new-run form offers (what ``RepositoryPolicy.offered`` finds)."""

    items: list[str]


@router.get("/console/repositories", response_model=Repositories)
async def repositories(state: State, principal: Viewer) -> Repositories:
    """The git repositories the server's repository rule lets a run name (none without one)."""
    if state.repositories is None:
        return Repositories(items=[])
    found = await asyncio.to_thread(state.repositories.offered, _MAX_REPOSITORIES)
    return Repositories(items=[str(p) for p in found])


class WhoAmI(BaseModel):
    """The caller (a bearer key or the session), for a console choosing what to show."""

    principal: str
    roles: list[str]
    projects: list[str]


@router.get("/console/whoami", response_model=WhoAmI)
async def whoami(principal: Viewer) -> WhoAmI:
    """Who the presented key (or session) is: a remote backend's console asks this."""
    return WhoAmI(
        principal=principal.name,
        roles=sorted(principal.roles),
        projects=sorted(principal.projects or ()),
    )


class Backends(BaseModel):
    """The other servers this console may switch to (``[server] console_backends``)."""

    items: list[str]


@router.get("/console/backends", response_model=Backends)
async def backends(state: State, principal: Viewer) -> Backends:
    """The configured backends' addresses (their keys are typed in the page, never stored)."""
    return Backends(items=list(state.settings.console_backends))
