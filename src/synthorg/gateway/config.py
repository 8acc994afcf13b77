"""Gateway configuration: providers, the models they serve, prices, key file, listen address."""

from __future__ import annotations

import json
import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    model_validator,
)

from synthorg.errors import ConfigError, NotFoundError, UsageError
from synthorg.paths import synthorg_home

ProviderKind = Literal["openai", "anthropic", "scripted"]

DEMO_MODEL = "scripted-demo"
"""The model the built-in scripted provider serves; priced so demos show a cost."""


class ProviderConfig(BaseModel):
    """One upstream provider and the models it serves."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, description="Provider name bearers bind to.")
    kind: ProviderKind = Field(description="openai (any compatible API), anthropic or scripted.")
    base_url: str = Field(default="", description="Upstream base URL, e.g. https://host/v1.")
    api_key_env: str | None = Field(
        default=None, description="NAME of the env var holding the key; read only in the gateway."
    )
    models: tuple[str, ...] = Field(default=(), description="Model ids this provider serves.")
    timeout_s: float = Field(
        default=600.0, gt=0, description="Longest wait for an answer (a stream's first chunk)."
    )
    idle_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="Longest silence between a stream's chunks; then the request is cut.",
    )
    stream_timeout_s: float = Field(
        default=1800.0,
        gt=0,
        description="Longest a whole stream may last, however lively; then it is cut.",
    )
    script: str | None = Field(
        default=None, description="scripted: registered script (or 'module:attr') for all models."
    )
    scripts: dict[str, str] = Field(
        default_factory=dict, description="scripted: per-model script names overriding 'script'."
    )
    latency_ms: float = Field(default=0.0, ge=0, description="scripted: latency per turn.")

    @model_validator(mode="after")
    def _check_kind(self) -> ProviderConfig:
        if self.kind != "scripted" and not self.base_url:
            raise ValueError(f"provider {self.name!r} ({self.kind}) needs a base_url")
        return self


class ModelPrice(BaseModel):
    """Price of one model in US dollars per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_per_mtok_usd: Decimal = Field(ge=0, description="USD per 1M prompt tokens.")
    output_per_mtok_usd: Decimal = Field(ge=0, description="USD per 1M completion tokens.")

    def cost(self, tokens_in: int, tokens_out: int) -> Decimal:
        """The cost of one request's tokens."""
        return (
            self.input_per_mtok_usd * tokens_in + self.output_per_mtok_usd * tokens_out
        ) / 1_000_000


def _default_providers() -> list[ProviderConfig]:
    return [ProviderConfig(name="scripted", kind="scripted", models=(DEMO_MODEL,), script="demo")]


def _default_prices() -> dict[str, ModelPrice]:
    return {DEMO_MODEL: ModelPrice(input_per_mtok_usd=Decimal(3), output_per_mtok_usd=Decimal(15))}


def _default_key_file() -> Path:
    return synthorg_home() / "keys" / "gateway-signing.key"


class GatewayConfig(BaseModel):
    """The whole gateway configuration; the default is valid and serves the scripted demo."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    providers: list[ProviderConfig] = Field(
        default_factory=_default_providers, description="Upstream providers."
    )
    prices: dict[str, ModelPrice] = Field(
        default_factory=_default_prices, description="Price per model id; unpriced models cost 0."
    )
    signing_key_file: Path = Field(
        default_factory=_default_key_file, description="HS256 key; generated when absent."
    )
    token_ttl_s: int = Field(default=6 * 3600, gt=0, description="Lifetime of minted bearers.")
    max_body_bytes: int = Field(
        default=8 << 20, gt=0, description="Largest chat request body accepted (413 past it)."
    )
    body_timeout_s: float = Field(
        default=30.0, gt=0, description="Longest a request body may take to arrive (408 then)."
    )
    max_body_in_flight: int = Field(
        default=256 << 20,
        gt=0,
        description="Request body bytes all requests together may hold (503 past it).",
    )
    host: str = Field(default="127.0.0.1", description="TCP listen host.")
    port: int = Field(default=8787, ge=0, le=65535, description="TCP listen port (0 = any).")
    unix_socket: Path | None = Field(default=None, description="Also/instead serve on this UDS.")
    max_output_tokens: dict[str, PositiveInt] = Field(
        default_factory=dict,
        description="Per model id: its documented output maximum (reserved when no cap is sent).",
    )
    admission_output_tokens: int = Field(
        default=16384,
        gt=0,
        description="Output maximum of a model without a max_output_tokens entry.",
    )
    admission_image_tokens: int = Field(
        default=40_000,
        ge=0,
        description="Prompt tokens one image may cost at most (reserved per image part).",
    )
    admission_bytes_per_token: float = Field(
        default=8.0,
        ge=1,
        description="Most request bytes one token covers: the request's minimum cost.",
    )
    ledger_refresh_s: float = Field(
        default=1.0, ge=0, description="How stale the cached ledger row of an execution may be."
    )
    reservation_lease_s: float = Field(
        default=30.0,
        gt=0,
        description="Lease of a request's hold in a shared ledger; renewed every third of it.",
    )

    @model_validator(mode="after")
    def _check_unique(self) -> GatewayConfig:
        names = [p.name for p in self.providers]
        if len(names) != len(set(names)):
            raise ValueError(f"provider names must be unique, got {names}")
        return self

    def provider(self, name: str) -> ProviderConfig | None:
        """The provider named ``name``."""
        return next((p for p in self.providers if p.name == name), None)

    def serving(self, model: str) -> list[str]:
        """The names of the configured providers that serve ``model``: the one place this is
        read."""
        return [p.name for p in self.providers if model in p.models]

    def serves(self, provider: str, model: str) -> bool:
        """Whether ``provider`` is configured and serves ``model`` (explicit binding)."""
        return provider in self.serving(model)

    def provider_for(self, model: str) -> str:
        """The one provider serving ``model``: NotFoundError when none does, UsageError when
        several do (the caller names one; no provider is picked on its behalf)."""
        serving = self.serving(model)
        if not serving:
            raise NotFoundError(
                f"no configured provider serves model {model!r}; add it to a provider's models "
                "in the [gateway] config"
            )
        if len(serving) > 1:
            raise UsageError(
                f"model {model!r} is served by several providers {serving}; choose one "
                "explicitly (--provider)"
            )
        return serving[0]

    def output_maximum(self, model: str) -> int:
        """The model's output maximum: its entry, else ``admission_output_tokens``."""
        return self.max_output_tokens.get(model, self.admission_output_tokens)

    def price(self, model: str) -> ModelPrice:
        """The model's price (zero when the table has no entry)."""
        return self.prices.get(model) or ModelPrice(
            input_per_mtok_usd=Decimal(0), output_per_mtok_usd=Decimal(0)
        )


def load_gateway_config(path: Path | None) -> GatewayConfig:
    """Read a TOML or JSON file (a top-level ``gateway`` table is used when present)."""
    if path is None:
        return GatewayConfig()
    try:
        raw = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read gateway config {path}: {exc}") from exc
    try:
        data: dict[str, Any] = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"gateway config {path} is not valid TOML/JSON: {exc}") from exc
    section = data.get("gateway", data)
    try:
        return GatewayConfig.model_validate(section)
    except ValidationError as exc:
        raise ConfigError(f"gateway config {path} is invalid:\n{exc}") from exc
