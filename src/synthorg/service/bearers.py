"""The gateway as the engine's BearerMinter: the one place a RunBinding is built from a run."""

from __future__ import annotations

from synthorg.engine.bearers import RunGrant
from synthorg.gateway.service import Gateway
from synthorg.gateway.signer import RunBinding


class GatewayMinter:
    """Opens a run's execution in the gateway's ledger and mints its one bearer."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def open(self, grant: RunGrant) -> str:
        binding = RunBinding(
            execution_id=grant.execution_id,
            agent_id=grant.agent_id,
            task_id=grant.task_id,
            project_id=grant.project_id,
            conversation_id=grant.conversation_id,
            provider=grant.provider,
            model_id=grant.model,
            cost_ceiling=grant.cost_ceiling,
        )
        await self._gateway.open_execution(binding)
        return self._gateway.mint(binding)

    async def close(self, execution_id: str, why: str) -> None:
        await self._gateway.finish_execution(execution_id, why)
