"""The loop catalogue: every loop type's factory, by name; the names are the known loop types.

A loop family exports its factories (``NATIVE_FACTORIES``, ``OPENHANDS_FACTORIES``); the known
loop types, config validation and the service's loop plugins (``service/loops.py``) all derive
from this one table, so a native loop added to its family's table is known everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from synthorg.engine.native.factories import NATIVE_FACTORIES
from synthorg.engine.openhands import OPENHANDS_FACTORIES
from synthorg.engine.registry import LoopFactory

LOOP_FACTORIES: Mapping[str, LoopFactory] = MappingProxyType(
    {**NATIVE_FACTORIES, **OPENHANDS_FACTORIES}
)
"""Factory by loop type, for every loop SynthOrg knows of."""

SUBTASK_LOOP_TYPES: frozenset[str] = frozenset(NATIVE_FACTORIES)
"""Loops a delegated sub-task may run: the native ones. The OpenHands SDK cannot be pointed at
a separate workspace per child here (see docs/architecture.md)."""
