"""Registry factories of the native loops; each requires NativeLoopDeps and fails loud without."""

from __future__ import annotations

from synthorg.engine.native.hybrid import HybridLoop
from synthorg.engine.native.plan_execute import PlanExecuteLoop
from synthorg.engine.native.react import ReactLoop
from synthorg.engine.native.runtime import NativeLoop, NativeLoopDeps
from synthorg.engine.protocol import ExecutionLoop
from synthorg.engine.registry import LoopDependencies, LoopFactory

NATIVE_LOOPS: tuple[type[NativeLoop], ...] = (ReactLoop, PlanExecuteLoop, HybridLoop)


def _factory(loop: type[NativeLoop]) -> LoopFactory:
    def build(deps: LoopDependencies) -> ExecutionLoop:
        return loop(deps.require(NativeLoopDeps, loop.loop_type))

    return build


NATIVE_FACTORIES: dict[str, LoopFactory] = {loop.loop_type: _factory(loop) for loop in NATIVE_LOOPS}
"""Factories to merge into a LoopRegistry, by each loop's own name."""
