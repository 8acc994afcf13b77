"""Engine configuration: loop selection and run defaults."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from synthorg.domain import Complexity

KNOWN_LOOP_TYPES: frozenset[str] = frozenset({"react", "plan_execute", "hybrid", "openhands"})
"""Every loop type SynthOrg knows of, whether or not this deployment can build it."""


def check_loop_type(value: str) -> str:
    """``value`` if it names a known loop, else a ValueError listing the known ones."""
    if value not in KNOWN_LOOP_TYPES:
        raise ValueError(f"unknown loop type {value!r}; known: {sorted(KNOWN_LOOP_TYPES)}")
    return value


class EngineConfig(BaseModel):
    """The ``[engine]`` section."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    loop_auto_select_enabled: bool = Field(
        default=False, description="Pick the loop from the task's complexity."
    )
    loop_complexity_overrides: dict[Complexity, str] = Field(
        default_factory=dict, description="Complexity -> loop type, merged over the defaults."
    )
    default_loop_type: str = Field(
        default="react", description="The loop used when selection is off or no rule matches."
    )
    max_turns: int = Field(default=30, ge=1, le=10_000, description="Default turn cap of a run.")

    @field_validator("default_loop_type")
    @classmethod
    def _known_default(cls, value: str) -> str:
        return check_loop_type(value)

    @field_validator("loop_complexity_overrides")
    @classmethod
    def _known_overrides(cls, value: dict[Complexity, str]) -> dict[Complexity, str]:
        for loop_type in value.values():
            check_loop_type(loop_type)
        return value
