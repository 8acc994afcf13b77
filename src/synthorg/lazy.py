"""Package re-exports loaded on first use (PEP 562): importing one submodule runs no other.

A package ``__init__`` that imported its backends eagerly would load them into every process
that imports any of its submodules (``synthorg.sandbox.protocol`` loaded the bwrap backend).
The import-rule check (scripts/check_import_rules.py) reads each package's ``_WHERE`` table to
resolve ``from package import Name`` to the submodule that defines it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``package.<where[name]>`` when ``name`` is asked."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
