"""Admission holds in a ledger shared by processes: take, wait for, renew and settle them.

Used when the ledger is a ``SharedBudgetLedger`` (PostgreSQL): every admitted request holds its
worst case in the ledger until it is settled, so gateways in any number of processes (workers,
a zombie and its successor) admit against the same spend and holds. The rule they apply is the
one the in-process admission applies (``admission._shared_rule``); this module does the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from decimal import Decimal

from synthorg.errors import SynthOrgError
from synthorg.store.protocol import BudgetFigures, BudgetHold, ExecutionUsage, SharedBudgetLedger

log = logging.getLogger(__name__)

_FIRST_WAIT_S = 0.005
_MOST_WAIT_S = 0.2


class SharedBudget:
    """This process's holds in the shared ledger (one per admitted request)."""

    def __init__(self, ledger: SharedBudgetLedger, lease_s: float) -> None:
        self.ledger = ledger
        self.lease_s = lease_s
        self.holder = f"gw-{secrets.token_hex(8)}"
        self._held: set[str] = set()
        self._renewer: asyncio.Task[None] | None = None

    async def hold(
        self,
        *,
        execution_id: str,
        conversation_id: str,
        amount: Decimal,
        tokens_in: int,
        tokens_out: int,
        admit: Callable[[BudgetFigures], bool],
    ) -> BudgetHold:
        """Hold ``amount`` once ``admit`` accepts; waits while holders elsewhere fill the budget.

        ``admit`` refuses by raising; it declines (returns False) while the request neither fits
        nor is alone, and the wait ends when another holder settles or its lease runs out.
        """
        hold = BudgetHold(
            reservation_id=f"{self.holder}-{secrets.token_hex(8)}",
            execution_id=execution_id,
            conversation_id=conversation_id,
            amount=amount,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
        )
        wait = _FIRST_WAIT_S
        self._held.add(hold.reservation_id)  # renewed from now on, even if the answer is lost
        try:
            while not await self.ledger.reserve_budget(
                hold, holder=self.holder, lease_s=self.lease_s, admit=admit
            ):
                await asyncio.sleep(wait)  # another process's hold: poll the ledger, backing off
                wait = min(wait * 2, _MOST_WAIT_S)
        except BaseException:
            self._held.discard(hold.reservation_id)
            raise
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew(), name="gateway-hold-renewal")
        return hold

    async def settle(
        self, hold: BudgetHold, *, tokens_in: int, tokens_out: int, cost_usd: Decimal
    ) -> ExecutionUsage:
        """Replace the hold by the request's bill (a failed write leaves it to expire: billed
        its whole amount, never less than the request can have cost)."""
        try:
            return await self.ledger.settle_reservation(
                hold, tokens_in=tokens_in, tokens_out=tokens_out, cost_usd=cost_usd
            )
        finally:
            self._held.discard(hold.reservation_id)

    async def _renew(self) -> None:
        while self._held:
            await asyncio.sleep(self.lease_s / 3)
            if not self._held:
                return
            try:
                await self.ledger.renew_reservations(
                    self.holder, sorted(self._held), lease_s=self.lease_s
                )
            except SynthOrgError as exc:  # the store is down: the next round tries again
                log.warning("could not renew the gateway's budget holds: %s", exc)

    async def aclose(self) -> None:
        """Stop renewing (holds left unsettled expire after their lease)."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
