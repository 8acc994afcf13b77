"""Search attributes: what an operator filters runs by in the Temporal UI/CLI.

``temporal workflow list --query 'SynthorgProject="web" AND SynthorgStatus="running"'``.
Custom attributes exist only once registered on the namespace: ``register`` does it (the
worker at start-up, the first start of a process); the keys themselves are plain data the
workflow sandbox may import.
"""

from __future__ import annotations

from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

PROJECT = SearchAttributeKey.for_keyword("SynthorgProject")
LOOP = SearchAttributeKey.for_keyword("SynthorgLoop")
STATUS = SearchAttributeKey.for_keyword("SynthorgStatus")
KEYS = (PROJECT, LOOP, STATUS)

_registered: set[tuple[int, str]] = set()


def initial(project: str, loop: str) -> TypedSearchAttributes:
    """The attributes a run's workflow starts with (its status is ``queued`` until a worker
    takes it; the workflow updates it as the run moves on)."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(PROJECT, project),
            SearchAttributePair(LOOP, loop),
            SearchAttributePair(STATUS, "queued"),
        ]
    )


async def register(client: Client, namespace: str) -> None:
    """Add the attributes this namespace lacks (once per client; idempotent on the server).

    Needs operator rights on the namespace; where they are missing (a managed cluster), an
    operator runs ``temporal operator search-attribute create --name SynthorgProject --type
    Keyword`` (and the same for SynthorgLoop, SynthorgStatus) once.
    """
    if (id(client), namespace) in _registered:
        return
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import (
        AddSearchAttributesRequest,
        ListSearchAttributesRequest,
    )

    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    missing = {
        key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        for key in KEYS
        if key.name not in listed.custom_attributes
    }
    if missing:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
            )
        except RPCError as exc:  # another process registered them first
            if exc.status is not RPCStatusCode.ALREADY_EXISTS:
                raise
    _registered.add((id(client), namespace))
