"""The registry fails loud: unknown loops, unbuildable loops, missing dependencies."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from synthorg.domain import ExecutionResult
from synthorg.engine import (
    ExecutionLoop,
    LoopContext,
    LoopDependencies,
    LoopRegistry,
    MissingLoopDepsError,
    UnknownLoopError,
    known_loop_types,
)
from synthorg.errors import ConfigError


@dataclass(frozen=True)
class _Deps:
    label: str


class _Loop:
    def __init__(self, deps: _Deps, loop_type: str = "react") -> None:
        self.deps = deps
        self._type = loop_type

    def get_loop_type(self) -> str:
        return self._type

    async def execute(self, context: LoopContext) -> ExecutionResult:
        raise NotImplementedError


def _factory(deps: LoopDependencies) -> ExecutionLoop:
    return _Loop(deps.require(_Deps, "react"))


def test_known_and_buildable() -> None:
    registry = LoopRegistry({"react": _factory})
    assert registry.known == known_loop_types()
    assert {"react", "plan_execute", "hybrid", "openhands"} <= known_loop_types()
    assert registry.buildable == frozenset({"react"})


def test_build_with_deps() -> None:
    loop = LoopRegistry({"react": _factory}).build("react", LoopDependencies(_Deps("x")))
    assert isinstance(loop, _Loop)
    assert loop.deps.label == "x"


def test_missing_deps_fail_loud() -> None:
    with pytest.raises(MissingLoopDepsError, match="needs _Deps"):
        LoopRegistry({"react": _factory}).build("react", LoopDependencies())


def test_unknown_and_unbuildable() -> None:
    registry = LoopRegistry({"react": _factory})
    with pytest.raises(UnknownLoopError, match="unknown loop type"):
        registry.build("magic", LoopDependencies())
    with pytest.raises(UnknownLoopError, match="not buildable here"):
        registry.build("openhands", LoopDependencies())
    with pytest.raises(ConfigError):
        LoopRegistry({"magic": _factory})


def test_factory_building_the_wrong_loop_is_refused() -> None:
    registry = LoopRegistry({"hybrid": lambda deps: _Loop(_Deps("x"), "react")})
    with pytest.raises(ConfigError, match="built a 'react' loop"):
        registry.build("hybrid", LoopDependencies())


def test_known_loop_types_are_the_catalogue_and_every_one_has_a_plugin() -> None:
    from synthorg.engine.catalogue import LOOP_FACTORIES
    from synthorg.service.loops import PLUGINS

    assert known_loop_types() == frozenset(LOOP_FACTORIES)
    assert {plugin.loop_type for plugin in PLUGINS} == known_loop_types()
