"""The loop catalogue: every loop type's factory, by name, checked against the known names.

A loop family exports its factories (``NATIVE_FACTORIES``, ``OPENHANDS_FACTORIES``); the names
they may use are data in ``engine.loop_names`` (which config validation reads without loading
any loop), and building this table fails loud when a family and the names disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from synthorg.engine.loop_names import NATIVE_LOOP_TYPES, OPENHANDS_LOOP_TYPES
from synthorg.engine.native.factories import NATIVE_FACTORIES
from synthorg.engine.openhands import OPENHANDS_FACTORIES
from synthorg.engine.registry import LoopFactory, check_family

check_family("native", NATIVE_FACTORIES, NATIVE_LOOP_TYPES)
check_family("openhands", OPENHANDS_FACTORIES, OPENHANDS_LOOP_TYPES)

LOOP_FACTORIES: Mapping[str, LoopFactory] = MappingProxyType(
    {**NATIVE_FACTORIES, **OPENHANDS_FACTORIES}
)
"""Factory by loop type, for every loop SynthOrg knows of."""

SUBTASK_LOOP_TYPES: frozenset[str] = NATIVE_LOOP_TYPES
"""Loops a delegated sub-task may run: the native ones. The OpenHands SDK cannot be pointed at
a separate workspace per child here (see docs/architecture.md)."""
