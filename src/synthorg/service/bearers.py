"""The gateway as the engine's BearerMinter: the one place a RunBinding is built from a run."""

from __future__ import annotations

from dataclasses import asdict

from synthorg.engine.bearers import RunGrant
from synthorg.gateway.service import Gateway
from synthorg.gateway.signer import RunBinding


class GatewayMinter:
    """Opens a run's execution in the gateway's ledger and mints its one bearer."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def open(self, grant: RunGrant) -> str:
        binding = RunBinding(**asdict(grant))  # the same fields, validated by the gateway
        await self._gateway.open_execution(binding)
        return self._gateway.mint(binding)

    async def close(self, execution_id: str, why: str) -> None:
        await self._gateway.finish_execution(execution_id, why)
