"""How a console session authenticates: the cookie on REST (plus the CSRF token on every
mutating call), the cookie plus the CSRF token as the first frame on the event WebSocket.

A request carrying ``Authorization: Bearer`` is handled exactly as before; the console only
adds the cookie path. The WebSocket keeps its documented protocol: the server's
``Authenticator`` is wrapped so that, on a socket whose handshake carried a valid session
cookie from the server's own origin, the session's CSRF token is accepted as the auth token
(and re-checked every 0.25 s like a key, so sign-out or revocation closes the socket).
"""

from __future__ import annotations

import contextvars
from collections.abc import Collection
from http.cookies import SimpleCookie

from fastapi import HTTPException, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from synthorg.server.auth import ApiKey, Principal, Role
from synthorg.server.console.sessions import Session, SessionStore, same_token
from synthorg.server.state import Authenticator, Credentials, ServerState, bearer_principal

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CSRF_HEADER = "X-CSRF-Token"

_socket_session: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "console_socket_session", default=None
)
"""The session cookie of the WebSocket being served (set only for same-origin handshakes)."""


def cookie_name(port: int | None, *, secure: bool) -> str:
    """Per port (cookies ignore ports: two servers on one host must not share a session);
    ``__Host-`` under TLS pins it to this host and path /."""
    return f"{'__Host-' if secure else ''}synthorg_session_{port or 0}"


def principal_of(auth: Authenticator, key_id: str) -> Principal | None:
    """The principal of an unrevoked key, by id (as ``KeyStore.authenticate`` builds it)."""
    record: ApiKey | None = next((k for k in auth.list() if k.id == key_id), None)
    return None if record is None else record.as_principal()


def request_cookie(request: Request) -> str | None:
    """The session token of this request's cookie, if any."""
    secure = request.url.scheme == "https"
    return request.cookies.get(cookie_name(request.url.port, secure=secure))


def session_of(request: Request, sessions: SessionStore) -> tuple[str, Session] | None:
    """The cookie token and its live session."""
    token = request_cookie(request)
    if token is None:
        return None
    session = sessions.get(token)
    return None if session is None else (token, session)


def cookie_or_bearer(request: Request, state: ServerState, credentials: Credentials) -> Principal:
    """The server's ``request_auth`` with the console: a bearer key as before, else a session
    cookie whose CSRF token every mutating call must echo in ``X-CSRF-Token``."""
    if credentials is not None:
        return bearer_principal(state, credentials, request)
    sessions: SessionStore = request.app.state.console_sessions
    found = session_of(request, sessions)
    if found is None:
        return bearer_principal(state, None, request)  # the usual 401
    _, session = found
    given = request.headers.get(CSRF_HEADER)
    # Mutating calls must echo the token; any call that sends one must send this session's:
    # the console sends it on reads too, so a cookie tossed in by another port of the host
    # (another session) is refused rather than shown as the signed-in person.
    if (request.method in MUTATING or given is not None) and not same_token(given, session.csrf):
        raise HTTPException(403, f"missing or wrong {CSRF_HEADER} header for this session")
    principal = principal_of(state.auth, session.key_id)
    if principal is None:
        raise HTTPException(401, "the key of this session was revoked: sign in again")
    return principal


class SessionAuthenticator:
    """The server's authenticator, also accepting a session's CSRF token as the WebSocket auth
    token when (and only when) the socket's handshake carried that session's cookie."""

    def __init__(self, inner: Authenticator, sessions: SessionStore) -> None:
        self.inner = inner
        self.sessions = sessions

    def authenticate(self, key: str) -> Principal | None:
        """A key as before; or the CSRF token of the session this socket was opened with."""
        token = _socket_session.get()
        if token is not None:
            session = self.sessions.get(token)
            if session is not None and same_token(key, session.csrf):
                return principal_of(self.inner, session.key_id)
        return self.inner.authenticate(key)

    def create(
        self, principal: str, roles: set[Role] | frozenset[Role], projects: Collection[str] = ()
    ) -> tuple[ApiKey, str]:
        """Delegated."""
        return self.inner.create(principal, roles, projects)

    def list(self) -> list[ApiKey]:
        """Delegated."""
        return self.inner.list()

    def revoke(self, key_id: str) -> ApiKey:
        """Delegated."""
        return self.inner.revoke(key_id)


class SocketSession:
    """ASGI middleware: remember the session cookie of a same-origin WebSocket handshake.

    Browsers send cookies on cross-site WebSocket handshakes unless SameSite stops them; the
    Origin check stops them here too (cross-site WebSocket hijacking)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        token = None
        host = headers.get("host", "")
        origin = headers.get("origin")
        if origin in (f"http://{host}", f"https://{host}") and "cookie" in headers:
            port = int(host.rsplit(":", 1)[1]) if ":" in host.rsplit("]", 1)[-1] else None
            jar = SimpleCookie()
            try:
                jar.load(headers["cookie"])
            except Exception:  # a malformed cookie header: no session, nothing more
                jar = SimpleCookie()
            for secure in (False, True):
                morsel = jar.get(cookie_name(port, secure=secure))
                if morsel is not None:
                    token = morsel.value
        reset = _socket_session.set(token)
        try:
            await self.app(scope, receive, send)
        finally:
            _socket_session.reset(reset)
