"""API key administration (admin role): list, create, revoke."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from synthorg.server.errors import responses
from synthorg.server.state import Admin, State
from synthorg.server.wire import CreateKey, KeyCreated, KeyView

router = APIRouter(prefix="/api/keys", tags=["keys"])


@router.get("", response_model=list[KeyView], responses=responses(401, 403))
async def list_keys(state: State, principal: Admin) -> list[KeyView]:
    """Every key record (revoked included); never the keys themselves."""
    return [KeyView.of(key) for key in await asyncio.to_thread(state.auth.list)]


@router.post("", status_code=201, response_model=KeyCreated, responses=responses(400, 401, 403))
async def create_key(body: CreateKey, state: State, principal: Admin) -> KeyCreated:
    """Make a key; the response is the only place the key is ever shown."""
    record, key = await asyncio.to_thread(
        state.auth.create, body.principal, set(body.roles), body.projects
    )
    return KeyCreated(key=key, record=KeyView.of(record))


@router.delete("/{key_id}", response_model=KeyView, responses=responses(401, 403, 404))
async def revoke_key(key_id: str, state: State, principal: Admin) -> KeyView:
    """Revoke a key; requests with it are refused from now on."""
    return KeyView.of(await asyncio.to_thread(state.auth.revoke, key_id))
