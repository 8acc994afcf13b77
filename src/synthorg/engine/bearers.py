"""Who mints the run's one bearer: the BearerMinter protocol (what it binds: domain.binding)."""

from __future__ import annotations

from typing import Protocol

from synthorg.domain.binding import RunBinding


class BearerMinter(Protocol):
    """Opens a run's execution at the gateway and mints its bearer: once per run.

    Every loop of the run (and the sandbox in it) uses that one bearer; it dies with the run
    at ``close``.
    """

    async def open(self, binding: RunBinding) -> str:
        """Open the execution in the ledger and return the run's bearer (fails loud, opening
        nothing, when the model is not bound to the provider)."""
        ...

    async def close(self, execution_id: str, why: str) -> None:
        """End the execution: its bearer is refused from now on."""
        ...
