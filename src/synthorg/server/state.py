"""What every route reaches: the store, the run service, auth, settings, metrics, streams."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Protocol

from fastapi import Depends, Header, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from synthorg.domain import ConversationRecord
from synthorg.errors import ConflictError, NotFoundError, UsageError
from synthorg.server.auth import ApiKey, Principal, Role
from synthorg.server.auth.throttle import KeyThrottle
from synthorg.server.config import ServerSettings
from synthorg.server.idempotency import IdempotencyKeys
from synthorg.server.metrics import ServerMetrics
from synthorg.server.subscribers import SubscriberLimit
from synthorg.service.protocol import RunService
from synthorg.service.repositories import RepositoryPolicy
from synthorg.store.protocol import ConversationStore, IdempotencyStore

if TYPE_CHECKING:  # the hub (mcp, httpx) is imported only by a serve with [forge] projects
    from synthorg.forge.hub import ForgeHub


class ServerStore(ConversationStore, IdempotencyStore, Protocol):
    """What the server keeps in the store: conversations and the idempotency keys."""


class Authenticator(Protocol):
    """Turns a bearer key into a principal and manages keys (``KeyStore`` implements it)."""

    def authenticate(self, key: str) -> Principal | None:
        """The principal of a valid key; None otherwise."""
        ...

    def create(
        self,
        principal: str,
        roles: set[Role] | frozenset[Role],
        projects: Collection[str] = (),
    ) -> tuple[ApiKey, str]:
        """Make a key (scoped to ``projects`` when given): its record and the secret."""
        ...

    def list(self) -> list[ApiKey]:
        """Every key record."""
        ...

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key by id."""
        ...


Credentials = HTTPAuthorizationCredentials | None
"""The request's ``Authorization: Bearer`` credentials, if it sent any."""


@dataclass
class ServerState:
    """The app's collaborators (one per app, on ``app.state.server``)."""

    settings: ServerSettings
    store: ServerStore
    service: RunService
    auth: Authenticator
    metrics: ServerMetrics
    forge: ForgeHub | None = None
    """Forge webhooks, when ``[forge]`` has projects."""
    repositories: RepositoryPolicy | None = None
    """The rule for which repositories a caller may name; the console offers what it allows
    (nothing without one). Runs are checked by the service's (or the workers') own copy."""
    subscribers: SubscriberLimit = field(init=False)
    starting: set[str] = field(default_factory=set)
    idempotency: IdempotencyKeys = field(init=False)
    throttle: KeyThrottle = field(init=False)
    request_auth: Callable[[Request, ServerState, Credentials], Principal] = field(
        default=lambda request, state, credentials: bearer_principal(state, credentials, request)
    )
    """Who sent a REST request (or 401): a bearer key; the console adds its session cookie.
    Set here, not through FastAPI's ``dependency_overrides``: with any override set, FastAPI
    re-inspects every dependency's signature on every request (~1 ms of CPU per request)."""

    def __post_init__(self) -> None:
        self.idempotency = IdempotencyKeys(self.store)
        self.subscribers = SubscriberLimit(self.settings.ws_subscribers_per_conversation)
        self.throttle = KeyThrottle(
            self.settings.signin_max_failures, self.settings.signin_window_s
        )

    def check_key(self, key: str, client: str) -> Principal | None:
        """The principal of ``key`` presented from ``client``; None (counted) when it is not
        valid; 429 while that address has failed too often, before the key is looked at, so
        the answer then says nothing about it. Every way in (sign-in, Bearer, WebSocket) asks
        here: one limit on guessing keys."""
        wait = self.throttle.retry_after(client)
        if wait is not None:
            raise HTTPException(
                429,
                f"too many failed API keys from this address; try again in {wait} s",
                headers={"Retry-After": str(wait)},
            )
        principal = self.auth.authenticate(key)
        if principal is None:
            self.throttle.failed(client)
        return principal

    async def conversation(self, conversation_id: str, principal: Principal) -> ConversationRecord:
        """The conversation, when the caller's key reaches its project; NotFoundError otherwise
        (a key of project A learns nothing of project B's conversations, not even that one
        exists)."""
        record = await self.store.get_conversation(conversation_id)
        if not principal.sees(record.task.project_id):
            raise NotFoundError(f"no conversation {conversation_id}")
        return record

    def project_filter(self, principal: Principal, project: str | None) -> str | None:
        """The project a listing is confined to: the one asked for, within the key's scope."""
        if principal.projects is None:
            return project
        if project is None:
            if len(principal.projects) == 1:
                return next(iter(principal.projects))
            raise UsageError(
                "this key is scoped to several projects: name one with ?project= "
                f"({', '.join(sorted(principal.projects))})"
            )
        if not principal.sees(project):
            raise HTTPException(403, f"{principal.name}'s key is not scoped to project {project}")
        return project

    async def start_run(self, conversation_id: str, message: str | None = None) -> None:
        """Start a run through the service; 409 for a start racing another one.

        The service refuses a second run once the first is registered; this closes the
        window while a start is still in flight (requests interleave at every await).
        """
        if conversation_id in self.starting or self.service.is_active(conversation_id):
            raise ConflictError(f"conversation {conversation_id} already has an active run")
        self.starting.add(conversation_id)
        try:
            await self.service.start(conversation_id, message=message)
        finally:
            self.starting.discard(conversation_id)
        self.metrics.commands.labels("start").inc()


async def get_state(request: Request) -> ServerState:
    """The ServerState of the app serving this request."""
    state: ServerState = request.app.state.server
    return state


State = Annotated[ServerState, Depends(get_state)]

_bearer = HTTPBearer(auto_error=False, description="An API key: Authorization: Bearer <key>.")


def client_address(request: Request) -> str:
    """The client's address as the ASGI server reports it (a proxy's X-Forwarded-For only when
    ``[server] forwarded_allow_ips`` names that proxy)."""
    return request.client.host if request.client else "unknown"


def bearer_principal(state: ServerState, credentials: Credentials, request: Request) -> Principal:
    """The caller of a bearer key, or 401 (429 while its address has failed too often)."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            401,
            "missing API key: send 'Authorization: Bearer <key>' (make one with "
            "`synthorg serve keys create`)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    principal = state.check_key(credentials.credentials, client_address(request))
    if principal is None:
        raise HTTPException(
            401, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"}
        )
    return principal


# The dependencies are coroutines: FastAPI runs a plain function in a worker thread, a hop
# per dependency per request. Nothing here blocks: the key file is stat()ed and re-read only
# when it changed, sessions are in memory.
async def authenticated(
    request: Request,
    state: State,
    credentials: Annotated[Credentials, Depends(_bearer)],
) -> Principal:
    """The caller, or 401."""
    return state.request_auth(request, state, credentials)


def require(role: Role) -> object:
    """A dependency: the caller holding ``role``, or 403. Key administration also needs a key
    not scoped to projects (a scoped admin could otherwise mint itself an unscoped key)."""

    async def check(principal: Annotated[Principal, Depends(authenticated)]) -> Principal:
        if not principal.can(role):
            raise HTTPException(
                403, f"{principal.name} lacks the {role.value} role needed for this request"
            )
        if role is Role.ADMIN and principal.projects is not None:
            raise HTTPException(
                403,
                f"{principal.name}'s key is scoped to projects; key administration needs "
                "an unscoped admin key",
            )
        return principal

    return Depends(check)


Viewer = Annotated[Principal, require(Role.VIEWER)]
Operator = Annotated[Principal, require(Role.OPERATOR)]
Approver = Annotated[Principal, require(Role.APPROVER)]
Admin = Annotated[Principal, require(Role.ADMIN)]

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        description="A unique string: a retry with the same key and body has no second effect "
        "and gets the first response again (Idempotent-Replayed: true).",
    ),
]
