"""The engine: the ExecutionLoop protocol, registry, selection, checkers and the runner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from synthorg.lazy import lazy_exports

if TYPE_CHECKING:
    from synthorg.engine.checkers import RunCheckers, budget_checker, flag_checker
    from synthorg.engine.config import EngineConfig, LoopType, known_loop_types
    from synthorg.engine.control import Decision, RunControl
    from synthorg.engine.no_op import is_no_op
    from synthorg.engine.protocol import EventSink, ExecutionLoop, GatewayAccess, LoopContext
    from synthorg.engine.registry import (
        LoopDependencies,
        LoopRegistry,
        MissingLoopDepsError,
        UnknownLoopError,
    )
    from synthorg.engine.runner import Lander, LandingRefused, LoopRunner, RunSink
    from synthorg.engine.selection import (
        DEFAULT_COMPLEXITY_RULES,
        AutoLoopConfig,
        build_auto_loop_config,
        select_loop_type,
    )
    from synthorg.engine.termination import EXECUTION_LOOP_TERMINATED, Terminated, TurnLedger

_WHERE = {
    "RunCheckers": "checkers",
    "budget_checker": "checkers",
    "flag_checker": "checkers",
    "EngineConfig": "config",
    "LoopType": "config",
    "known_loop_types": "config",
    "Decision": "control",
    "RunControl": "control",
    "is_no_op": "no_op",
    "EventSink": "protocol",
    "ExecutionLoop": "protocol",
    "GatewayAccess": "protocol",
    "LoopContext": "protocol",
    "LoopDependencies": "registry",
    "LoopRegistry": "registry",
    "MissingLoopDepsError": "registry",
    "UnknownLoopError": "registry",
    "Lander": "runner",
    "LandingRefused": "runner",
    "LoopRunner": "runner",
    "RunSink": "runner",
    "AutoLoopConfig": "selection",
    "DEFAULT_COMPLEXITY_RULES": "selection",
    "build_auto_loop_config": "selection",
    "select_loop_type": "selection",
    "EXECUTION_LOOP_TERMINATED": "termination",
    "Terminated": "termination",
    "TurnLedger": "termination",
}

__all__ = [
    "DEFAULT_COMPLEXITY_RULES",
    "EXECUTION_LOOP_TERMINATED",
    "AutoLoopConfig",
    "Decision",
    "EngineConfig",
    "EventSink",
    "ExecutionLoop",
    "GatewayAccess",
    "Lander",
    "LandingRefused",
    "LoopContext",
    "LoopDependencies",
    "LoopRegistry",
    "LoopRunner",
    "LoopType",
    "MissingLoopDepsError",
    "RunCheckers",
    "RunControl",
    "RunSink",
    "Terminated",
    "TurnLedger",
    "UnknownLoopError",
    "budget_checker",
    "build_auto_loop_config",
    "flag_checker",
    "is_no_op",
    "known_loop_types",
    "select_loop_type",
]

__getattr__ = lazy_exports(__name__, _WHERE)
