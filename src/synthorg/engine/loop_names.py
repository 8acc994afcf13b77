"""The loop types SynthOrg knows of, as data: one table every validator and the catalogue read.

Config validation needs only the names; importing the loops themselves (the catalogue) loads
the OpenHands loop and its sandbox wiring, so the names live here and the catalogue checks its
factories against them when it is built.
"""

from __future__ import annotations

NATIVE_LOOP_TYPES: frozenset[str] = frozenset({"react", "plan_execute", "hybrid"})
"""The native loops (engine/native): also the loops a delegated sub-task may run."""

OPENHANDS_LOOP_TYPES: frozenset[str] = frozenset({"openhands"})
"""Loops that drive the OpenHands SDK in its runtime (engine/openhands)."""

LOOP_TYPES: frozenset[str] = NATIVE_LOOP_TYPES | OPENHANDS_LOOP_TYPES
"""Every loop type SynthOrg knows of."""
