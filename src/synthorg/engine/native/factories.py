"""Registry factories of the native loops; each requires NativeLoopDeps and fails loud without."""

from __future__ import annotations

from synthorg.engine.native.hybrid import HybridLoop
from synthorg.engine.native.plan_execute import PlanExecuteLoop
from synthorg.engine.native.react import ReactLoop
from synthorg.engine.native.runtime import NativeLoopDeps
from synthorg.engine.protocol import ExecutionLoop
from synthorg.engine.registry import LoopDependencies, LoopFactory


def react_factory(deps: LoopDependencies) -> ExecutionLoop:
    """A react loop."""
    return ReactLoop(deps.require(NativeLoopDeps, "react"))


def plan_execute_factory(deps: LoopDependencies) -> ExecutionLoop:
    """A plan_execute loop."""
    return PlanExecuteLoop(deps.require(NativeLoopDeps, "plan_execute"))


def hybrid_factory(deps: LoopDependencies) -> ExecutionLoop:
    """A hybrid loop."""
    return HybridLoop(deps.require(NativeLoopDeps, "hybrid"))


NATIVE_FACTORIES: dict[str, LoopFactory] = {
    "react": react_factory,
    "plan_execute": plan_execute_factory,
    "hybrid": hybrid_factory,
}
"""Factories to merge into a LoopRegistry."""
