"""The loop registry: which loops exist, which can be built here, and their factories."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from synthorg.engine.config import known_loop_types
from synthorg.engine.protocol import ExecutionLoop
from synthorg.errors import ConfigError

T = TypeVar("T")


class MissingLoopDepsError(ConfigError):
    """A loop factory was called without the dependencies it needs."""


class UnknownLoopError(ConfigError):
    """A loop type that is not known or cannot be built here."""


class LoopDependencies:
    """Dependencies for loop factories, keyed by their type.

    A factory asks for what it needs with ``require``; a missing dependency fails loud,
    so an unwired deployment never silently falls back to another loop.
    """

    def __init__(self, *deps: object) -> None:
        self._by_type: dict[type, object] = {type(dep): dep for dep in deps}

    def require(self, kind: type[T], loop_type: str) -> T:
        """The dependency of type ``kind``, or MissingLoopDepsError naming the loop."""
        dep = self._by_type.get(kind)
        if dep is None:
            raise MissingLoopDepsError(
                f"loop {loop_type!r} needs {kind.__name__}, which this deployment did not "
                "provide; wire it at boot or choose another loop explicitly"
            )
        assert isinstance(dep, kind)
        return dep


LoopFactory = Callable[[LoopDependencies], ExecutionLoop]


def check_family(family: str, factories: Mapping[str, LoopFactory], names: frozenset[str]) -> None:
    """Fail loud when a loop family's factories and its names in ``engine.loop_names`` differ."""
    if frozenset(factories) != names:
        raise ConfigError(
            f"the {family} loop factories {sorted(factories)} do not match the known "
            f"{family} loop types {sorted(names)} (engine/loop_names.py)"
        )


class LoopRegistry:
    """Factories by loop type."""

    def __init__(self, factories: Mapping[str, LoopFactory]) -> None:
        unknown = set(factories) - known_loop_types()
        if unknown:
            raise ConfigError(f"factories registered for unknown loop types: {sorted(unknown)}")
        self._factories = dict(factories)

    @property
    def known(self) -> frozenset[str]:
        """Every loop type SynthOrg knows of."""
        return known_loop_types()

    @property
    def buildable(self) -> frozenset[str]:
        """Loop types with a factory in this registry."""
        return frozenset(self._factories)

    def build(self, loop_type: str, deps: LoopDependencies) -> ExecutionLoop:
        """A loop of ``loop_type``; fails loud when unknown, unbuildable or missing deps."""
        if loop_type not in self.known:
            raise UnknownLoopError(f"unknown loop type {loop_type!r}; known: {sorted(self.known)}")
        factory = self._factories.get(loop_type)
        if factory is None:
            raise UnknownLoopError(
                f"loop type {loop_type!r} is known but not buildable here; "
                f"buildable: {sorted(self.buildable)}"
            )
        loop = factory(deps)
        if loop.get_loop_type() != loop_type:
            raise ConfigError(f"factory for {loop_type!r} built a {loop.get_loop_type()!r} loop")
        return loop


def describe(registry: LoopRegistry) -> dict[str, Any]:
    """Known and buildable loop types, for doctor and the API."""
    return {"known": sorted(registry.known), "buildable": sorted(registry.buildable)}
