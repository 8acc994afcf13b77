"""Run ownership on PostgreSQL: one live owner per conversation, on a lease."""

from __future__ import annotations

from psycopg import errors as pg_errors

from synthorg.errors import ConflictError, NotFoundError
from synthorg.store import codec
from synthorg.store.errors import ConversationOwnedError
from synthorg.store.postgres_engine import PostgresEngine
from synthorg.store.protocol import RunClaimant, RunOwner

_OWNER_COLUMNS = (
    "owner_id, host, pid, since, heartbeat_at, expires_at, expires_at < clock_timestamp()"
)

# Atomic on the row lock: of concurrent claimants exactly one sees the WHERE hold.
_CLAIM = """
INSERT INTO conversation_owners AS o
    (conversation_id, owner_id, host, pid, since, heartbeat_at, expires_at)
VALUES (%(cid)s, %(oid)s, %(host)s, %(pid)s, clock_timestamp(), clock_timestamp(),
        clock_timestamp() + make_interval(secs => %(lease)s))
ON CONFLICT (conversation_id) DO UPDATE SET
    owner_id = excluded.owner_id, host = excluded.host, pid = excluded.pid,
    since = CASE WHEN o.owner_id = excluded.owner_id THEN o.since ELSE excluded.since END,
    heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at
WHERE o.expires_at < clock_timestamp() OR o.owner_id = excluded.owner_id
    OR o.owner_id = %(displace)s
RETURNING owner_id, host, pid, since, heartbeat_at, expires_at, FALSE
"""

_RENEW = """
WITH owner AS (
    UPDATE conversation_owners SET heartbeat_at = clock_timestamp(),
        expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
    WHERE conversation_id = %(cid)s AND owner_id = %(oid)s RETURNING expires_at
), runs AS (
    UPDATE executions SET lease_expires_at = owner.expires_at FROM owner
    WHERE executions.conversation_id = %(cid)s AND executions.status = 'active'
        AND executions.lease_expires_at IS NOT NULL
)
SELECT 1 FROM owner
"""
"""Renew the owner's lease and its run's execution's in one statement (take_over killed any
earlier execution of the conversation, so only this owner's run is extended)."""


class PostgresOwnership(PostgresEngine):
    """The ``conversation_owners`` table (mixed into PostgresStore)."""

    async def claim_conversation(
        self,
        conversation_id: str,
        claimant: RunClaimant,
        *,
        lease_s: float,
        displace: str | None = None,
    ) -> RunOwner:
        params = {
            "cid": conversation_id,
            "oid": claimant.owner_id,
            "host": claimant.host,
            "pid": claimant.pid,
            "lease": lease_s,
            "displace": displace,
        }
        for _ in range(3):  # the holder may release between our claim and our read
            try:
                rows = await self._all(_CLAIM, params)
            except pg_errors.ForeignKeyViolation as exc:
                raise NotFoundError(f"no conversation {conversation_id}") from exc
            if rows:
                return codec.owner(rows[0], ts=codec.utc, expired=bool(rows[0][6]))
            holder = await self.conversation_owner(conversation_id)
            if holder is not None:
                raise ConversationOwnedError(conversation_id, holder)
        raise ConflictError(f"conversation {conversation_id}: ownership changing; retry")

    async def renew_claim(self, conversation_id: str, owner_id: str, *, lease_s: float) -> bool:
        rows = await self._all(_RENEW, {"cid": conversation_id, "oid": owner_id, "lease": lease_s})
        return bool(rows)

    async def release_conversation(self, conversation_id: str, owner_id: str) -> None:
        await self._all(
            "DELETE FROM conversation_owners WHERE conversation_id = %s AND owner_id = %s"
            " RETURNING 1",
            (conversation_id, owner_id),
        )

    async def conversation_owner(self, conversation_id: str) -> RunOwner | None:
        rows = await self._all(
            f"SELECT {_OWNER_COLUMNS} FROM conversation_owners"  # noqa: S608
            " WHERE conversation_id = %s",
            (conversation_id,),
        )
        return codec.owner(rows[0], ts=codec.utc, expired=bool(rows[0][6])) if rows else None
