"""The one store schema and its forward migrations, rendered for SQLite or PostgreSQL.

Both backends get the same tables and columns; only the column types differ where the engines
do (timestamps, JSON, exact decimals). A migration is applied at most once: ``schema_version``
records each applied version, and callers run :func:`pending` inside a write-locked transaction
so two processes opening the same database at once cannot both apply it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from synthorg.errors import ConfigError

Dialect = Literal["sqlite", "postgres"]

_TYPES: dict[Dialect, dict[str, str]] = {
    "sqlite": {"ts": "TEXT", "json": "TEXT", "money": "TEXT", "bigint": "INTEGER"},
    "postgres": {"ts": "TIMESTAMPTZ", "json": "JSONB", "money": "NUMERIC", "bigint": "BIGINT"},
}

VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    applied_at {ts} NOT NULL
)
"""


@dataclass(frozen=True)
class Migration:
    """One forward step of the schema."""

    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "conversations, events, executions",
        (
            """
            CREATE TABLE conversations (
                id TEXT PRIMARY KEY,
                project_id TEXT NOT NULL,
                status TEXT NOT NULL,
                state {json} NOT NULL,
                last_seq {bigint} NOT NULL DEFAULT 0, -- seq counter (PostgreSQL appends)
                created_at {ts} NOT NULL,
                updated_at {ts} NOT NULL
            )
            """,
            "CREATE INDEX conversations_recent ON conversations (created_at DESC, id DESC)",
            """CREATE INDEX conversations_by_status
               ON conversations (status, created_at DESC, id DESC)""",
            """CREATE INDEX conversations_by_project
               ON conversations (project_id, created_at DESC, id DESC)""",
            """
            CREATE TABLE events (
                conversation_id TEXT NOT NULL
                    REFERENCES conversations (id) ON DELETE CASCADE,
                seq {bigint} NOT NULL,
                ts {ts} NOT NULL,
                kind TEXT NOT NULL,
                body {json} NOT NULL,
                PRIMARY KEY (conversation_id, seq)
            )
            """,
            """
            CREATE TABLE executions (
                execution_id TEXT PRIMARY KEY,
                conversation_id TEXT NOT NULL,
                model TEXT NOT NULL,
                provider TEXT NOT NULL,
                cost_ceiling_usd {money},
                requests {bigint} NOT NULL DEFAULT 0,
                tokens_in {bigint} NOT NULL DEFAULT 0,
                tokens_out {bigint} NOT NULL DEFAULT 0,
                cost_usd {money} NOT NULL,
                status TEXT NOT NULL,
                status_reason TEXT NOT NULL DEFAULT '',
                created_at {ts} NOT NULL,
                updated_at {ts} NOT NULL
            )
            """,
            "CREATE INDEX executions_by_conversation ON executions (conversation_id)",
        ),
    ),
    Migration(
        2,
        "conversation owners: one live process per conversation, held by a lease",
        (
            """
            CREATE TABLE conversation_owners (
                conversation_id TEXT PRIMARY KEY
                    REFERENCES conversations (id) ON DELETE CASCADE,
                owner_id TEXT NOT NULL,
                host TEXT NOT NULL,
                pid {bigint} NOT NULL,
                since {ts} NOT NULL,
                heartbeat_at {ts} NOT NULL,
                expires_at {ts} NOT NULL
            )
            """,
        ),
    ),
    Migration(
        3,  # 2 is the conversation owners' lease table (issue 14)
        "eval items",
        (
            """
            CREATE TABLE eval_items (
                eval_id TEXT NOT NULL,
                key TEXT NOT NULL,
                body {json} NOT NULL,
                updated_at {ts} NOT NULL,
                PRIMARY KEY (eval_id, key)
            )
            """,
        ),
    ),
    Migration(
        4,
        "delegation: a conversation's parent and the root of its tree",
        (
            "ALTER TABLE conversations ADD COLUMN parent_id TEXT",
            "ALTER TABLE conversations ADD COLUMN root_id TEXT",
            "CREATE INDEX conversations_by_parent ON conversations (parent_id, created_at, id)",
        ),
    ),
    Migration(
        5,
        "idempotency keys: a retried request has its effect once, across restarts",
        (
            """
            CREATE TABLE idempotency_keys (
                caller TEXT NOT NULL,
                route TEXT NOT NULL,
                key TEXT NOT NULL,
                fingerprint TEXT NOT NULL,
                status INTEGER, -- NULL while the first request is in progress
                body {json},
                created_at {ts} NOT NULL,
                expires_at {ts} NOT NULL,
                PRIMARY KEY (caller, route, key)
            )
            """,
            "CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at)",
        ),
    ),
    Migration(
        6,
        "delegation trees: the gateway sums a tree's spend by root (tree_budget)",
        ("CREATE INDEX conversations_by_root ON conversations (root_id)",),
    ),
    Migration(
        7,
        "budget reservations: admission across processes holds its worst case in the ledger",
        (
            """
            CREATE TABLE budget_reservations (
                reservation_id TEXT PRIMARY KEY,
                budget_key TEXT NOT NULL, -- the tree's root (or the conversation): one lock
                execution_id TEXT NOT NULL,
                holder TEXT NOT NULL,
                amount {money} NOT NULL,
                tokens_in {bigint} NOT NULL, -- the incomplete bill, charged if it expires
                tokens_out {bigint} NOT NULL,
                created_at {ts} NOT NULL,
                expires_at {ts} NOT NULL
            )
            """,
            "CREATE INDEX budget_reservations_by_key ON budget_reservations (budget_key)",
            "CREATE INDEX budget_reservations_by_execution ON budget_reservations (execution_id)",
        ),
    ),
    Migration(
        8,
        "run liveness: an execution lives on its owner's lease; the store names itself",
        (
            # NULL: not leased (an operator's bearer); else renewed with the owner's lease.
            "ALTER TABLE executions ADD COLUMN lease_expires_at {ts}",
            """
            CREATE TABLE store_identity (
                id TEXT PRIMARY KEY, -- random, made once: bearers name the ledger that issued them
                created_at {ts} NOT NULL
            )
            """,
        ),
    ),
    Migration(
        9,
        "forge deliveries: a webhook's work queued durably, a redelivery recognised by its id",
        (
            """
            CREATE TABLE forge_deliveries (
                delivery_id TEXT PRIMARY KEY,
                project_id TEXT NOT NULL,
                event TEXT NOT NULL,
                state TEXT NOT NULL,
                outcome TEXT NOT NULL DEFAULT '',
                issue {bigint},
                conversation_id TEXT,
                payload {json} NOT NULL,
                received_at {ts} NOT NULL,
                updated_at {ts} NOT NULL
            )
            """,
            "CREATE INDEX forge_deliveries_by_state ON forge_deliveries (state, received_at)",
            "CREATE INDEX forge_deliveries_recent ON forge_deliveries (received_at DESC)",
            """CREATE INDEX forge_deliveries_by_issue
               ON forge_deliveries (project_id, issue, received_at DESC)""",
        ),
    ),
    Migration(
        10,
        "forge pull requests: the one each conversation's run opened, as the forge answered",
        (
            """
            CREATE TABLE forge_pulls (
                conversation_id TEXT PRIMARY KEY,
                project_id TEXT NOT NULL,
                number {bigint} NOT NULL,
                html_url TEXT NOT NULL,
                updated_at {ts} NOT NULL
            )
            """,
            """CREATE INDEX forge_deliveries_by_conversation
               ON forge_deliveries (conversation_id, received_at)""",
        ),
    ),
)

IDENTIFY = (
    "INSERT INTO store_identity (id, created_at) SELECT {mark}, {mark}"
    " WHERE NOT EXISTS (SELECT 1 FROM store_identity)"
)
"""Name the store once (the first opener's random id wins), then read ``IDENTITY``."""
IDENTITY = "SELECT id FROM store_identity ORDER BY created_at LIMIT 1"

LATEST_VERSION = MIGRATIONS[-1].version


def render(statement: str, dialect: Dialect) -> str:
    """The statement with this dialect's column types filled in."""
    return statement.format(**_TYPES[dialect])


def pending(current: int) -> tuple[Migration, ...]:
    """Migrations after ``current``; a database newer than this code is an error."""
    if current > LATEST_VERSION:
        raise ConfigError(
            f"the store database has schema version {current}, newer than this SynthOrg "
            f"understands ({LATEST_VERSION}); upgrade SynthOrg or point it at another database"
        )
    return tuple(m for m in MIGRATIONS if m.version > current)
