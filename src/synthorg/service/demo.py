"""The demo: a small sample repository whose test fails until the agent fixes the bug."""

from __future__ import annotations

from pathlib import Path

from synthorg.workspace.git import run_git_sync

DEMO_TASK = (
    "The tests in test_calc.py fail. Find the bug in calc.py, fix it, and run the tests "
    "until they pass."
)

_CALC = '''"""A tiny calculator."""


def add(a: int, b: int) -> int:
    """Return the sum of a and b."""
    return a - b


def mul(a: int, b: int) -> int:
    """Return the product of a and b."""
    return a * b
'''

_TEST = '''"""Tests of calc: `python3 -m unittest -v` (or pytest)."""

import unittest

from calc import add, mul


class CalcTest(unittest.TestCase):
    def test_add(self) -> None:
        self.assertEqual(add(2, 3), 5)

    def test_mul(self) -> None:
        self.assertEqual(mul(4, 5), 20)


if __name__ == "__main__":
    unittest.main()
'''

_README = "# calc\n\nA demo repository for SynthOrg. Run `python3 -m unittest -v`.\n"

_GITIGNORE = "__pycache__/\n*.pyc\n"


def create_demo_repo(path: Path) -> Path:
    """Create the sample repository at ``path`` (which must not exist) and commit it."""
    if path.exists():
        raise FileExistsError(f"{path} already exists")
    path.mkdir(parents=True)
    (path / "calc.py").write_text(_CALC)
    (path / "test_calc.py").write_text(_TEST)
    (path / "README.md").write_text(_README)
    (path / ".gitignore").write_text(_GITIGNORE)
    env_identity = [
        "-c",
        "user.name=SynthOrg Demo",
        "-c",
        "user.email=demo@synthorg.invalid",
    ]
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["commit", "-q", "-m", "calc: initial"],
    ):
        run_git_sync([*env_identity, *args], path)
    return path
