"""The import-rule checker sees relative, lazy and dynamic imports, and what a module loads."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rules() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_import_rules", ROOT / "scripts" / "check_import_rules.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_relative_imports_resolve_to_absolute_names(rules: ModuleType, tmp_path: Path) -> None:
    path = rules.PACKAGE / "engine" / "native" / "react.py"
    found = dict((name, line) for line, name in rules.imports_of(path))
    # react.py's own imports are absolute; build a relative one in the same place to check
    # the resolution rather than the file's current text.
    probe = path.with_name("_probe_relative.py")
    probe.write_text(
        "from ..runner import LoopRunner\nfrom . import turn\nfrom ...store import x\n"
    )
    try:
        names = {name for _, name in rules.imports_of(probe)}
    finally:
        probe.unlink()
    assert "synthorg.engine.runner.LoopRunner" in names
    assert "synthorg.engine.native.turn" in names
    assert "synthorg.store.x" in names
    assert found  # the real file is read too


def test_package_re_exports_resolve_through_the_lazy_table(rules: ModuleType) -> None:
    probe = rules.PACKAGE / "engine" / "_probe_lazy.py"
    probe.write_text(
        "import importlib\n"
        "from synthorg.sandbox import BwrapSandbox\n"
        "m = importlib.import_module('synthorg.store.sqlite')\n"
    )
    try:
        names = {name for _, name in rules.imports_of(probe)}
        violations = [v for v in rules.static_violations() if "_probe_lazy" in v]
    finally:
        probe.unlink()
    assert "synthorg.sandbox.bwrap.BwrapSandbox" in names
    assert "synthorg.store.sqlite" in names
    assert len(violations) == 2, violations


def test_runtime_check_names_what_an_eager_package_init_loads(rules: ModuleType) -> None:
    # A fresh interpreter importing only the sandbox protocol must not hold a backend.
    loaded = rules.loaded_by(["synthorg.sandbox.protocol"])
    assert "synthorg.sandbox.protocol" in loaded
    assert "synthorg.sandbox.bwrap" not in loaded
    assert not rules.allowed_at_runtime("engine", "synthorg.sandbox.bwrap")
    assert rules.allowed_at_runtime("engine", "synthorg.sandbox")  # the package, on the way


def test_the_whole_tree_holds_the_rules(rules: ModuleType) -> None:
    assert rules.static_violations() == []
    assert rules.runtime_violations() == []
