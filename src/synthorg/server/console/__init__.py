"""The web console served at ``/``: session sign-in, security headers, the page and assets."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles

from synthorg.server.auth import KeyStore
from synthorg.server.console.auth import SessionAuthenticator, SocketSession, cookie_or_bearer
from synthorg.server.console.headers import SecurityHeaders, content_security_policy
from synthorg.server.console.routes import STATIC, router
from synthorg.server.console.sessions import SessionStore
from synthorg.server.state import ServerState


def install_console(app: FastAPI, state: ServerState) -> None:
    """Wire the console into the app: routes, assets, cookie auth, headers.

    Sessions persist next to the key file when the authenticator is the key file (so a
    restarted server keeps its signed-in browsers); otherwise they live in memory."""
    path = state.auth.path.with_name("sessions.json") if isinstance(state.auth, KeyStore) else None
    sessions = SessionStore(path)
    app.state.console_sessions = sessions
    state.auth = SessionAuthenticator(state.auth, sessions)
    state.request_auth = cookie_or_bearer
    app.include_router(router)
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
    app.add_middleware(SocketSession)
    backends = state.settings.console_backends
    connect = (*backends, *(b.replace("http", "ws", 1) for b in backends))
    app.add_middleware(SecurityHeaders, csp=content_security_policy(connect))
    if state.settings.cors_origins:
        # Outermost, so preflights are answered before the OPTIONS handling of HttpLimits.
        # Credentials are not allowed: a remote console sends the key as a Bearer header.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(state.settings.cors_origins),
            allow_credentials=False,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
            max_age=600,
        )
