"""Issue 35 (3), bearers: which provider serves a model, the bearer's lifetime, and the one way
a bearer is issued are each decided in one place."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import synthorg
from synthorg.errors import NotFoundError, UsageError
from synthorg.gateway.config import GatewayConfig, ProviderConfig
from synthorg.gateway.signer import GatewaySigner

PACKAGE = Path(synthorg.__file__).parent


def _config() -> GatewayConfig:
    return GatewayConfig(
        providers=[
            ProviderConfig(name="a", kind="scripted", models=("only-a", "both"), script="echo"),
            ProviderConfig(name="b", kind="scripted", models=("both",), script="echo"),
        ]
    )


def test_the_provider_serving_a_model_is_one_function() -> None:
    config = _config()
    assert config.provider_for("only-a") == "a"
    assert config.serves("a", "both") and config.serves("b", "both")
    assert not config.serves("b", "only-a") and not config.serves("c", "only-a")
    with pytest.raises(UsageError, match=r"several providers \['a', 'b'\]"):
        config.provider_for("both")
    with pytest.raises(NotFoundError, match="no configured provider serves model 'gpt-x'"):
        config.provider_for("gpt-x")


def test_only_the_gateway_config_reads_which_models_a_provider_serves() -> None:
    """What `grep` would find: `model in provider.models` is asked in gateway/config.py only."""
    asking = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Compare)
                and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
                and any(
                    isinstance(c, ast.Attribute) and c.attr == "models" for c in node.comparators
                )
            ):
                asking.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert len(asking) == 1 and asking[0].startswith("gateway/config.py:"), asking


def test_the_signer_takes_its_lifetime_bound_from_the_config_only() -> None:
    """The default lifetime is GatewayConfig.token_ttl_s's alone: a signer built without the
    configured bound would bound bearers by a second, silent default."""
    bound = inspect.signature(GatewaySigner).parameters["max_ttl_s"]
    assert bound.default is inspect.Parameter.empty
