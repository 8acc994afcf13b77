"""Enforce one-way imports between SynthOrg's components (run in CI), in the AST and at runtime.

``domain`` imports nothing of ours; ``engine`` depends on protocols, never on the server, the
CLI or concrete sandbox/store backends; infrastructure components import only the shared
basics and the protocols they implement; ``service`` wires them and is used only by the
composition roots (``server``, ``cli``). Exit 1 listing every violation.

Two checks, one table (``ALLOWED``):
- static: every ``import``/``from … import`` (absolute and relative, at any depth, including
  ``importlib.import_module("synthorg…")`` with a literal name), with ``from package import
  Name`` resolved through the package's lazy ``_WHERE`` table (synthorg.lazy) to the submodule
  that defines ``Name``;
- runtime: each component's modules are imported in a fresh interpreter and every
  ``synthorg`` module in ``sys.modules`` afterwards must be one the component may import (a
  package ``__init__`` that loads its backends eagerly shows up here, not in the AST).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "synthorg"
BASICS = (
    "synthorg.errors",
    "synthorg.logging",
    "synthorg.paths",
    "synthorg.localsock",
    "synthorg.lazy",
    "synthorg.githardening",  # host-side git settings: workspace's git and the MCP push
    "synthorg.reaper",
    "synthorg.hostwork",  # a run's host-work budget, which the spawners read
    "synthorg.domain",
    "synthorg.serving",
    "synthorg.extras",  # which optional extra installs a missing import
    "synthorg.faultpoints",  # where a fault test stops a process on purpose
    "synthorg.processes",  # whether a recorded pid is alive: one rule
    "synthorg.overlaylog",  # what a run's overlay changed: the sandbox writes, the landing reads
)

# The store's protocol with the error and watcher types its signatures name.
STORE_PROTOCOL = ("synthorg.store.protocol", "synthorg.store.errors", "synthorg.store.tail")

# component -> module prefixes it may import (its own package is always allowed).
ALLOWED: dict[str, tuple[str, ...]] = {
    "domain": (),
    "errors": (),
    "paths": (),
    "localsock": (),
    "reaper": ("synthorg.errors", "synthorg.hostwork"),
    "hostwork": ("synthorg.errors",),
    "logging": (),
    "extras": (),
    "lazy": (),
    "githardening": (),
    "faultpoints": (),
    "processes": (),
    "overlaylog": (),
    "web": (),  # static console assets; the package holds no code
    "serving": ("synthorg.errors", "synthorg.localsock"),
    "engine": (
        *BASICS,
        *STORE_PROTOCOL,
        "synthorg.store.reconcile",  # which actions are open / never ran: one rule, the store's
        # store.reconcile's observation texts and clock live in the codec (which seals secrets);
        # neither is a backend
        "synthorg.store.codec",
        "synthorg.store.secrets",
        "synthorg.sandbox.protocol",
        "synthorg.sandbox.errors",  # sandbox.protocol names its errors
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
    "gateway": (*BASICS, *STORE_PROTOCOL, "synthorg.settings"),
    "mcp": (
        *BASICS,
        *STORE_PROTOCOL,
        "synthorg.gateway.signer",
        "synthorg.gateway.liveness",  # bearers die with their run: the gateway's own rule
        "synthorg.settings",
    ),
    "settings": (*BASICS, "synthorg.engine.config", "synthorg.engine.loop_names"),
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
    # Workers run the service's runs under Temporal: the service and what it wires, never the
    # REST server or the CLI.
    "distributed": (
        *BASICS,
        "synthorg.settings",
        "synthorg.engine",
        "synthorg.store",
        "synthorg.workspace",
        "synthorg.service",
        "synthorg.gateway",
        "synthorg.mcp",
        "synthorg.sandbox",
        "synthorg.runtime",
        "synthorg.server.config",  # the [server] section a worker's store/keys settings share
    ),
    # Evaluation drives runs through the service and judges commits in a sandbox.
    "eval": (
        *BASICS,
        "synthorg.settings",
        "synthorg.engine",
        "synthorg.store",
        "synthorg.workspace",
        "synthorg.service",
        "synthorg.gateway",
        "synthorg.mcp",
        "synthorg.sandbox",
        "synthorg.runtime",
    ),
    # Forge webhooks drive runs through the service's protocol and keep deliveries in the store.
    "forge": (
        *BASICS,
        *STORE_PROTOCOL,
        "synthorg.settings",
        "synthorg.service.protocol",
        "synthorg.service.options",
        "synthorg.engine",
        "synthorg.store",
        "synthorg.mcp",
        "synthorg.workspace",
    ),
}
# Modules a component's own code must not import: the service's composition root wires the
# service's modules, so none of them may import it back (an import circle).
FORBIDDEN_WITHIN: dict[str, tuple[str, ...]] = {"service": ("synthorg.service.boot",)}

# Composition roots may import anything: the REST/WebSocket server and the commands.
UNRESTRICTED = {"cli", "server"}


def component_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return "__init__" if parts == ("__init__",) else parts[0]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def lazy_table(package: str) -> dict[str, str]:
    """The package's ``_WHERE`` table (name -> submodule), empty when it has none."""
    init = SRC.joinpath(*package.split(".")) / "__init__.py"
    if not init.is_file():
        return {}
    for node in ast.parse(init.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(node, ast.AnnAssign):
            target = node.target
        if isinstance(target, ast.Name) and target.id == "_WHERE" and node.value is not None:
            table = ast.literal_eval(node.value)
            return {str(k): str(v) for k, v in table.items()}
    return {}


def _resolve_relative(path: Path, level: int, module: str | None) -> str:
    base = module_name(path).split(".")
    if path.name != "__init__.py":
        base.pop()  # a module's own package
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, module] if module else base)


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(path, node.level, node.module) if node.level else node.module
            if not base:
                continue
            lazy = lazy_table(base)
            for alias in node.names:
                sub = lazy.get(alias.name)
                found.append(
                    (node.lineno, f"{base}.{sub}.{alias.name}" if sub else f"{base}.{alias.name}")
                )
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in found if name.startswith("synthorg.")]


def allowed(component: str, module: str) -> bool:
    if module.startswith(f"synthorg.{component}.") or module == f"synthorg.{component}":
        return True
    return any(module == p or module.startswith(p + ".") for p in ALLOWED.get(component, ()))


def allowed_at_runtime(component: str, module: str) -> bool:
    """Allowed, or a package whose submodule is allowed (its ``__init__`` runs on the way)."""
    if module == "synthorg" or allowed(component, module):
        return True
    prefixes = (f"synthorg.{component}", *ALLOWED.get(component, ()))
    return any(p.startswith(module + ".") for p in prefixes)


def static_violations() -> list[str]:
    violations: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        component = component_of(path)
        if component in UNRESTRICTED or component == "__init__":
            continue
        if component not in ALLOWED:
            violations.append(f"{path}: component {component!r} has no import rule; add one")
            continue
        own = module_name(path)
        for line, module in imports_of(path):
            if not allowed(component, module):
                violations.append(f"{path}:{line}: {component} must not import {module}")
            for root in FORBIDDEN_WITHIN.get(component, ()):
                if own != root and (module == root or module.startswith(root + ".")):
                    violations.append(f"{path}:{line}: {own} must not import its root {root}")
    return violations


_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m == "synthorg" or m.startswith("synthorg."))))
"""


def loaded_by(modules: list[str]) -> list[str]:
    """The synthorg modules a fresh interpreter holds after importing ``modules``."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules],
        capture_output=True,
        text=True,
        check=False,
        cwd=SRC,
    )
    if done.returncode != 0:
        raise RuntimeError(f"importing {modules} failed:\n{done.stderr[-2000:]}")
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def component_modules(component: str) -> list[str]:
    root = PACKAGE / component
    if root.is_dir():
        return [module_name(p) for p in sorted(root.rglob("*.py"))]
    return [f"synthorg.{component}"] if root.with_suffix(".py").is_file() else []


def runtime_violations_of(component: str) -> list[str]:
    modules = component_modules(component)
    if not modules:
        return []
    bad = [m for m in loaded_by(modules) if not allowed_at_runtime(component, m)]
    if not bad:
        return []
    # Name the first module of the component that loads each: one interpreter per module.
    blame: dict[str, str] = {}
    for module in modules:
        for loaded in loaded_by([module]):
            if loaded in bad and loaded not in blame:
                blame[loaded] = module
    return [
        f"runtime: importing {blame.get(m, component)} loads {m}, which {component} must not"
        for m in bad
    ]


def runtime_violations() -> list[str]:
    components = [c for c in ALLOWED if c not in UNRESTRICTED]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(runtime_violations_of, components))
    return [v for found in results for v in found]


def main() -> int:
    violations = static_violations() + runtime_violations()
    for violation in violations:
        print(violation)
    if violations:
        print(f"{len(violations)} import-rule violation(s)")
        return 1
    print(f"import rules: ok ({len(ALLOWED)} components, static and runtime)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
