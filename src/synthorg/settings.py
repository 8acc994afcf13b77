"""Configuration: a TOML file plus ``SYNTHORG__SECTION__KEY`` environment overrides, validated.

The engine's config model is imported when settings are loaded, not when this module is:
the engine package costs a CLI command that only reads the store a large share of its
start-up (issue 16).
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from synthorg.errors import ConfigError
from synthorg.paths import synthorg_home

if TYPE_CHECKING:
    from synthorg.engine.config import EngineConfig
else:
    EngineConfig = Any  # validated by _engine_config, imported on use

ENV_PREFIX = "SYNTHORG__"
CONFIG_ENV = "SYNTHORG_CONFIG"
_TOP_LEVEL = frozenset({"home", "engine"})
SECTIONS = frozenset(
    {
        "gateway",
        "mcp",
        "sandbox",
        "gate",
        "limits",
        "run",
        "server",
        "store",
        "openhands",
        "delegation",
        "distributed",
        "projects",
        "forge",
    }
)
"""Component sections a config may have; anything else is a typo or a stale key (an error)."""


def _engine_config(value: Any) -> Any:
    """An ``EngineConfig`` from a table (None stays None: the default is made on use)."""
    if value is None:
        return None
    from synthorg.engine.config import EngineConfig

    return value if isinstance(value, EngineConfig) else EngineConfig.model_validate(value)


class Settings(BaseModel):
    """The whole configuration. Every section has working defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    home: Path = Field(default_factory=synthorg_home, description="The data dir.")
    engine_table: Annotated[EngineConfig | None, BeforeValidator(_engine_config)] = Field(
        default=None, alias="engine", description="Loop selection as configured (None: defaults)."
    )
    sections: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Component sections, validated by their owners."
    )

    @field_validator("sections")
    @classmethod
    def _known_sections(cls, sections: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        unknown = sorted(set(sections) - SECTIONS)
        if unknown:
            raise ValueError(_unknown_sections(unknown, None))
        return sections

    @cached_property
    def engine(self) -> EngineConfig:
        """The ``[engine]`` section (its defaults when not configured)."""
        return self.engine_table if self.engine_table is not None else _engine_config({})


def _unknown_sections(names: list[str], path: Path | None) -> str:
    where = f" in {path}" if path else ""
    return (
        f"unknown config section {', '.join(f'[{n}]' for n in names)}{where} (from the file or "
        f"a SYNTHORG__ variable); known: {', '.join(sorted(_TOP_LEVEL | SECTIONS))}"
    )


def load_settings(path: Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``path`` (or ``$SYNTHORG_CONFIG``, or defaults) with env overrides."""
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    path = path or (Path(env[CONFIG_ENV]) if env.get(CONFIG_ENV) else None)
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"config file not found: {path}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    _apply_env_overrides(data, env)
    if "home" not in data and env.get("SYNTHORG_HOME"):
        data["home"] = env["SYNTHORG_HOME"]
    top = {key: value for key, value in data.items() if key in _TOP_LEVEL}
    sections = {key: value for key, value in data.items() if key not in _TOP_LEVEL}
    unknown = sorted(set(sections) - SECTIONS)
    if unknown:
        raise ConfigError(_unknown_sections(unknown, path))
    for name, value in sections.items():
        if not isinstance(value, dict):
            raise ConfigError(f"config: [{name}] must be a table, got {type(value).__name__}")
    try:
        if "engine" in top:
            top["engine"] = _engine_config(top["engine"])
    except ValidationError as exc:
        raise ConfigError(_explain(exc, path, prefix="engine")) from exc
    try:
        return Settings(**top, sections=sections)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, path)) from exc


def section[M: BaseModel](settings: Settings, name: str, model: type[M]) -> M:
    """Validate the ``[name]`` section with its component's model."""
    try:
        return model.model_validate(settings.sections.get(name, {}))
    except ValidationError as exc:
        raise ConfigError(_explain(exc, None, prefix=name)) from exc


def _apply_env_overrides(data: dict[str, Any], env: Mapping[str, str]) -> None:
    for key, raw in env.items():
        if not key.startswith(ENV_PREFIX):
            continue
        parts = [part.lower() for part in key[len(ENV_PREFIX) :].split("__") if part]
        if not parts:
            continue
        node = data
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{key}: {part} is not a table in the config")
            node = child
        node[parts[-1]] = _parse_env_value(key, raw)


def _parse_env_value(key: str, raw: str) -> Any:
    # A scalar stays text for its field's model to validate ("30" is an int to an int field,
    # "null" a model name to a str field, "1e3" no turn count); only a list or a table, which
    # an environment variable cannot spell otherwise, is JSON.
    if raw.lstrip()[:1] not in ("[", "{"):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{key}: a list or table must be valid JSON ({exc})") from exc


def _explain(exc: ValidationError, path: Path | None, prefix: str = "") -> str:
    where = f" in {path}" if path else ""
    lines = [f"invalid configuration{where}:"]
    for error in exc.errors():
        loc = ".".join(str(part) for part in (prefix, *error["loc"]) if part != "")
        lines.append(f"  {loc}: {error['msg']}")
    return "\n".join(lines)
