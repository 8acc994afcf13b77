"""Complexity-based loop selection: off by default, explicit when on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from synthorg.domain import Complexity, Task
from synthorg.engine.config import EngineConfig, check_loop_type

DEFAULT_COMPLEXITY_RULES: Mapping[Complexity, str] = MappingProxyType(
    {
        Complexity.TRIVIAL: "react",
        Complexity.SIMPLE: "react",
        Complexity.MODERATE: "hybrid",
        Complexity.COMPLEX: "plan_execute",
    }
)


@dataclass(frozen=True)
class AutoLoopConfig:
    """Complexity rules and the fallback for tasks no rule matches."""

    rules: Mapping[Complexity, str]
    default_loop_type: str

    def pick(self, task: Task) -> str:
        """The loop for ``task``."""
        return self.rules.get(task.complexity, self.default_loop_type)


def build_auto_loop_config(config: EngineConfig) -> AutoLoopConfig | None:
    """The selection config, or None when ``loop_auto_select_enabled`` is off."""
    if not config.loop_auto_select_enabled:
        return None
    rules = {**DEFAULT_COMPLEXITY_RULES, **config.loop_complexity_overrides}
    return AutoLoopConfig(rules=MappingProxyType(rules), default_loop_type=config.default_loop_type)


def select_loop_type(task: Task, config: EngineConfig, *, forced: str | None = None) -> str:
    """A forced loop wins; then the complexity rules when enabled; then the default."""
    if forced is not None:
        return check_loop_type(forced)
    auto = build_auto_loop_config(config)
    if auto is None:
        return config.default_loop_type
    return auto.pick(task)
