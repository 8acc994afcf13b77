"""The PostgreSQL backend of the store (psycopg 3, async pool), for several processes or hosts.

An append is one statement, so one round trip and one transaction: it bumps the
conversation's ``last_seq`` (the row lock orders concurrent appends of one conversation) and
inserts the event with that seq. After the commit the store wakes its own followers and
queues a NOTIFY for other processes (sent outside the append transaction; see ``Notifier``
for why). Each store keeps one LISTEN connection. A notification only wakes followers, who
then read ``seq > last delivered`` from the table (see ``tail.py``), so lost, duplicated or
reordered notifications cannot cause gaps or duplicates; followers also re-read every
``poll_interval`` seconds in case a notification was lost.
"""

from __future__ import annotations

from synthorg.store.postgres_budget import PostgresBudget
from synthorg.store.postgres_eval import PostgresEvalItems
from synthorg.store.postgres_events import PostgresEvents
from synthorg.store.postgres_forge import PostgresForgeDeliveries
from synthorg.store.postgres_idempotency import PostgresIdempotencyKeys
from synthorg.store.postgres_ledger import PostgresLedger
from synthorg.store.postgres_ownership import PostgresOwnership
from synthorg.store.protocol import ReconcileReport
from synthorg.store.reconcile import reconcile
from synthorg.store.tail import LiveTail


class PostgresStore(
    PostgresEvents,
    PostgresOwnership,
    PostgresLedger,
    PostgresBudget,
    PostgresEvalItems,
    PostgresIdempotencyKeys,
    PostgresForgeDeliveries,
    LiveTail,
):
    """Conversations, the event log and the ledger in a PostgreSQL database.

    Its parts, one table (or job) each: ``postgres_engine`` (pool, bounds, migrations),
    ``postgres_conversations``, ``postgres_events``, ``postgres_ownership``,
    ``postgres_ledger``, ``postgres_budget``, and the smaller tables'.
    """

    async def reconcile_after_restart(self) -> ReconcileReport:
        return await reconcile(self)
