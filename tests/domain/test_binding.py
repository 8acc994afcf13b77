"""A run's binding is one type: the engine grants what the gateway mints (issue 35, 3)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import get_type_hints

import synthorg
from synthorg.domain.binding import RunBinding
from synthorg.engine.bearers import BearerMinter
from synthorg.gateway.signer import GatewaySigner

BOUND = set(RunBinding.model_fields)  # no other class may declare them all again


def _first_parameter_type(function: object) -> object:
    hints = get_type_hints(function)
    name = list(inspect.signature(function).parameters)[1]  # after self
    return hints[name]


def test_the_engine_grants_the_type_the_gateway_mints() -> None:
    assert _first_parameter_type(BearerMinter.open) is _first_parameter_type(GatewaySigner.mint)


def test_the_bound_fields_are_declared_in_one_class() -> None:
    """What `grep` would find: one class in src declares the bound fields (claims inherit)."""
    declaring = []
    package = Path(synthorg.__file__).parent
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                fields = {
                    s.target.id
                    for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                }
                if fields >= BOUND:
                    declaring.append(f"{path.relative_to(package)}:{node.name}")
    assert declaring == ["domain/binding.py:RunBinding"]
