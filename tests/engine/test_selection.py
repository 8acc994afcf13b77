"""Loop selection: off by default, rules merged with overrides, explicit fallback."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from synthorg.domain import Complexity, Task
from synthorg.engine import EngineConfig, build_auto_loop_config, select_loop_type


def _task(complexity: Complexity) -> Task:
    return Task(id="t1", project_id="p1", prompt="do it", complexity=complexity, repository=".")


def test_selection_is_off_by_default() -> None:
    config = EngineConfig()
    assert build_auto_loop_config(config) is None
    for complexity in Complexity:
        assert select_loop_type(_task(complexity), config) == "react"


def test_rules_merge_overrides_and_fall_back() -> None:
    config = EngineConfig(
        loop_auto_select_enabled=True,
        loop_complexity_overrides={Complexity.COMPLEX: "openhands"},
        default_loop_type="hybrid",
    )
    assert select_loop_type(_task(Complexity.COMPLEX), config) == "openhands"
    assert select_loop_type(_task(Complexity.TRIVIAL), config) == "react"
    auto = build_auto_loop_config(config)
    assert auto is not None
    assert auto.default_loop_type == "hybrid"


def test_forced_loop_wins_and_is_checked() -> None:
    config = EngineConfig(loop_auto_select_enabled=True)
    assert select_loop_type(_task(Complexity.COMPLEX), config, forced="react") == "react"
    with pytest.raises(ValueError, match="unknown loop type 'nope'"):
        select_loop_type(_task(Complexity.COMPLEX), config, forced="nope")


def test_bad_loop_names_in_config_are_refused() -> None:
    with pytest.raises(ValidationError, match="unknown loop type"):
        EngineConfig(default_loop_type="magic")
    with pytest.raises(ValidationError, match="unknown loop type"):
        EngineConfig(loop_complexity_overrides={Complexity.SIMPLE: "magic"})
