"""Upstream providers behind the Provider protocol, and building them from config."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from synthorg.gateway.config import GatewayConfig, ProviderConfig
from synthorg.gateway.providers.base import Provider, ProviderError
from synthorg.gateway.providers.openai_compat import OpenAICompatProvider
from synthorg.gateway.providers.scripted import ScriptedProvider

if TYPE_CHECKING:
    from synthorg.gateway.providers.anthropic import AnthropicProvider

__all__ = [
    "AnthropicProvider",
    "OpenAICompatProvider",
    "Provider",
    "ProviderError",
    "ScriptedProvider",
    "build_provider",
    "build_providers",
]


def build_provider(config: ProviderConfig) -> Provider:
    """The provider a config entry describes."""
    if config.kind == "scripted":
        return ScriptedProvider.from_config(config)
    if config.kind == "anthropic":
        # Imported here: a gateway without Anthropic never loads its mapping.
        from synthorg.gateway.providers.anthropic import AnthropicProvider

        return AnthropicProvider.from_config(config)
    return OpenAICompatProvider.from_config(config)


def build_providers(config: GatewayConfig) -> dict[str, Provider]:
    """Every configured provider by name."""
    return {p.name: build_provider(p) for p in config.providers}


def __getattr__(name: str) -> Any:
    if name == "AnthropicProvider":
        from synthorg.gateway.providers.anthropic import AnthropicProvider

        return AnthropicProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
