"""Engine configuration: loop selection and run defaults."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from synthorg.domain import Complexity
from synthorg.engine.loop_names import LOOP_TYPES


def known_loop_types() -> frozenset[str]:
    """Every loop type SynthOrg knows of (engine.loop_names; the catalogue checks against it)."""
    return LOOP_TYPES


def check_loop_type(value: str) -> str:
    """``value`` if it names a known loop, else a ValueError listing the known ones."""
    known = known_loop_types()
    if value not in known:
        raise ValueError(f"unknown loop type {value!r}; known: {sorted(known)}")
    return value


class _LoopTypeSchema:
    """The JSON schema of a loop type: an enum of the known names."""

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), "enum": sorted(known_loop_types())}


LoopType = Annotated[str, AfterValidator(check_loop_type), _LoopTypeSchema()]
"""A loop type name, validated against the known names: the one loop-name validator."""


class EngineConfig(BaseModel):
    """The ``[engine]`` section."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    loop_auto_select_enabled: bool = Field(
        default=False, description="Pick the loop from the task's complexity."
    )
    loop_complexity_overrides: dict[Complexity, LoopType] = Field(
        default_factory=dict, description="Complexity -> loop type, merged over the defaults."
    )
    default_loop_type: LoopType = Field(
        default="react", description="The loop used when selection is off or no rule matches."
    )
    max_turns: int = Field(default=30, ge=1, le=10_000, description="Default turn cap of a run.")
