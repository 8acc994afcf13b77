"""Enforce one-way imports between SynthOrg's components (run in CI).

``domain`` imports nothing of ours; ``engine`` depends on protocols, never on the server, the
CLI or concrete sandbox/store backends; infrastructure components import only the shared
basics and the protocols they implement; ``service`` wires them and is used only by the
composition roots (``server``, ``cli``). Exit 1 listing every violation.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
BASICS = (
    "synthorg.errors",
    "synthorg.logging",
    "synthorg.paths",
    "synthorg.localsock",
    "synthorg.reaper",
    "synthorg.domain",
    "synthorg.serving",
    "synthorg.extras",  # which optional extra installs a missing import
)

# component -> module prefixes it may import (its own package is always allowed).
ALLOWED: dict[str, tuple[str, ...]] = {
    "domain": (),
    "errors": (),
    "paths": (),
    "localsock": (),
    "reaper": (),
    "logging": (),
    "extras": (),
    "serving": ("synthorg.errors", "synthorg.localsock"),
    "engine": (
        *BASICS,
        "synthorg.store.protocol",
        "synthorg.store.reconcile",  # which actions are open / never ran: one rule, the store's
        "synthorg.sandbox.protocol",
        "synthorg.sandbox.toolbox_client",
        "synthorg.gateway.scripted",  # scripted models (pure functions) for tests and the demo
        "synthorg.gateway.wire",  # the chat wire types those scripts read
        "synthorg.mcp.client",
        "synthorg.runtime",
    ),
    "store": BASICS,
    "workspace": BASICS,
    "sandbox": BASICS,
    "runtime": BASICS,
    "gateway": (*BASICS, "synthorg.store.protocol", "synthorg.settings"),
    "mcp": (
        *BASICS,
        "synthorg.store.protocol",
        "synthorg.gateway.signer",
        "synthorg.gateway.liveness",  # bearers die with their run: the gateway's own rule
        "synthorg.settings",
    ),
    "settings": (*BASICS, "synthorg.engine.config"),
    # The run service wires the components; only the composition roots (server, cli) use it.
    "service": (
        *BASICS,
        "synthorg.settings",
        "synthorg.engine",
        "synthorg.store",
        "synthorg.gateway",
        "synthorg.mcp",
        "synthorg.sandbox",
        "synthorg.workspace",
        "synthorg.runtime",
    ),
}
# Composition roots may import anything.
UNRESTRICTED = {"cli", "server", "distributed", "eval", "web", "__init__"}


def component_of(path: Path) -> str:
    parts = path.relative_to(SRC / "synthorg").with_suffix("").parts
    return parts[0]


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return [(line, name) for line, name in found if name.startswith("synthorg.")]


def allowed(component: str, module: str) -> bool:
    if module.startswith(f"synthorg.{component}.") or module == f"synthorg.{component}":
        return True
    return any(module == p or module.startswith(p + ".") for p in ALLOWED.get(component, ()))


def main() -> int:
    violations: list[str] = []
    for path in sorted((SRC / "synthorg").rglob("*.py")):
        component = component_of(path)
        if component in UNRESTRICTED:
            continue
        if component not in ALLOWED:
            violations.append(f"{path}: component {component!r} has no import rule; add one")
            continue
        for line, module in imports_of(path):
            if not allowed(component, module):
                violations.append(f"{path}:{line}: {component} must not import {module}")
    for violation in violations:
        print(violation)
    if violations:
        print(f"{len(violations)} import-rule violation(s)")
        return 1
    print("import rules: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
