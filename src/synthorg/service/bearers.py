"""The gateway as the engine's BearerMinter."""

from __future__ import annotations

from synthorg.domain.binding import RunBinding
from synthorg.gateway.service import Gateway


class GatewayMinter:
    """Opens a run's execution in the gateway's ledger and mints its one bearer."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def open(self, binding: RunBinding) -> str:
        return await self._gateway.issue(binding)

    async def close(self, execution_id: str, why: str) -> None:
        await self._gateway.finish_execution(execution_id, why)
