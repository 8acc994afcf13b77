"""The durable store: base state, event log and ledger, on SQLite or PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING

from synthorg.lazy import lazy_exports

if TYPE_CHECKING:
    from synthorg.store.config import StoreConfig
    from synthorg.store.opening import open_store
    from synthorg.store.protocol import (
        ConversationPage,
        ConversationStore,
        ExecutionStatus,
        ExecutionUsage,
        LedgerStore,
        ReconcileReport,
        RunClaimant,
        RunOwner,
        Store,
    )
    from synthorg.store.secrets import REDACTED, SecretCipher

_WHERE = {
    "StoreConfig": "config",
    "open_store": "opening",
    "ConversationPage": "protocol",
    "ConversationStore": "protocol",
    "ExecutionStatus": "protocol",
    "ExecutionUsage": "protocol",
    "LedgerStore": "protocol",
    "ReconcileReport": "protocol",
    "RunClaimant": "protocol",
    "RunOwner": "protocol",
    "Store": "protocol",
    "REDACTED": "secrets",
    "SecretCipher": "secrets",
}

__all__ = [
    "REDACTED",
    "ConversationPage",
    "ConversationStore",
    "ExecutionStatus",
    "ExecutionUsage",
    "LedgerStore",
    "ReconcileReport",
    "RunClaimant",
    "RunOwner",
    "SecretCipher",
    "Store",
    "StoreConfig",
    "open_store",
]

__getattr__ = lazy_exports(__name__, _WHERE)
