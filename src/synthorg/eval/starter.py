"""The starter suite: 20 small repositories with real bugs, generated deterministically.

Nothing random: the same code always writes the same repositories, commits (fixed author and
dates) and suite file, so results are comparable across machines and releases. Four kinds:
- trivial: one wrong operator in a one-file module, a visible failing test;
- simple: the same in a two-module package (the bug in the second module);
- moderate: the bug in a helper module used by the module the test exercises;
- complex: a change that must keep the tests green (a refactor, a test to write).
Each task's hidden check adds tests the agent never saw (the ``test_patch``).
"""

from __future__ import annotations

import operator
import textwrap
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from synthorg.domain import Complexity
from synthorg.workspace.git import run_git_sync

_APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_OPS = (("add", "+", "-"), ("subtract", "-", "+"), ("multiply", "*", "+"), ("times", "*", "-"))
_PREFIXES = ("price", "vector", "score", "total", "budget", "weight")
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "SynthOrg starter",
    "GIT_AUTHOR_EMAIL": "starter@synthorg.invalid",
    "GIT_COMMITTER_NAME": "SynthOrg starter",
    "GIT_COMMITTER_EMAIL": "starter@synthorg.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


@dataclass(frozen=True)
class StarterTask:
    """One generated task: its files at the base commit, the prompt, the hidden tests."""

    id: str
    complexity: Complexity
    prompt: str
    files: dict[str, str]
    hidden: dict[str, str]
    tags: tuple[str, ...]
    fail_to_pass: tuple[str, ...]
    """Test ids (pytest node ids) the judge must see pass: the hidden ones, at least."""
    pass_to_pass: tuple[str, ...] = ()


def _operator_task(index: int, complexity: Complexity) -> StarterTask:
    name, good, bad = _OPS[index % len(_OPS)]
    prefix = _PREFIXES[index % len(_PREFIXES)]
    func = f"{prefix}_{name}"
    a, b = 7 + index, 3 + index % 5
    expected = _APPLY[good](a, b)
    module = {
        Complexity.TRIVIAL: "calc.py",
        Complexity.SIMPLE: f"{prefix}/ops.py",
        Complexity.MODERATE: f"{prefix}/helpers.py",
    }[complexity]
    body = f'def {func}(a: int, b: int) -> int:\n    """{name.title()} two numbers."""\n'
    body += f"    return a {bad} b\n"
    files: dict[str, str] = {module: body}
    importer = module.removesuffix(".py").replace("/", ".")
    if complexity is not Complexity.TRIVIAL:
        files[f"{prefix}/__init__.py"] = ""
    if complexity is Complexity.MODERATE:
        files[f"{prefix}/api.py"] = (
            f"from {importer} import {func}\n\n\ndef combined(a: int, b: int) -> int:\n"
            f"    return {func}(a, b)\n"
        )
    files[f"test_{prefix}.py"] = textwrap.dedent(
        f"""\
        import unittest

        from {importer} import {func}


        class Test{prefix.title()}(unittest.TestCase):
            def test_{func}(self) -> None:
                self.assertEqual({func}({a}, {b}), {expected})


        if __name__ == "__main__":
            unittest.main()
        """
    )
    hidden = {
        f"test_hidden_{prefix}.py": textwrap.dedent(
            f"""\
            import unittest

            from {importer} import {func}


            class TestHidden(unittest.TestCase):
                def test_hidden_{func}(self) -> None:
                    for a, b in ((0, 0), (2, 9), (-4, 6), (100, 1)):
                        self.assertEqual({func}(a, b), a {good} b)
            """
        )
    }
    return StarterTask(
        id=f"{complexity.value}-{index:02d}-{func}",
        complexity=complexity,
        prompt=(
            f"The tests in test_{prefix}.py fail. Find the bug in `{module}`, fix it, and run "
            "the tests to confirm."
        ),
        files=files,
        hidden=hidden,
        tags=("operator-bug", complexity.value),
        fail_to_pass=(
            f"test_hidden_{prefix}.py::TestHidden::test_hidden_{func}",
            f"test_{prefix}.py::Test{prefix.title()}::test_{func}",
        ),
    )


def _refactor_task() -> StarterTask:
    files = {
        "shapes.py": (
            "def area(kind: str, a: float, b: float = 0.0) -> float:\n"
            '    if kind == "square":\n        return a * a\n'
            '    if kind == "rect":\n        return a * b\n'
            "    raise ValueError(kind)\n"
        ),
        "test_shapes.py": (
            "import unittest\n\nfrom shapes import area\n\n\nclass TestShapes(unittest.TestCase):\n"
            '    def test_square(self) -> None:\n        self.assertEqual(area("square", 3), 9)\n\n'
            '    def test_rect(self) -> None:\n        self.assertEqual(area("rect", 2, 5), 10)\n'
        ),
    }
    hidden = {
        "test_hidden_shapes.py": (
            "import unittest\n\nfrom shapes import area, rect_area, square_area\n\n\n"
            "class TestHidden(unittest.TestCase):\n"
            "    def test_split(self) -> None:\n"
            "        self.assertEqual(square_area(4), 16)\n"
            "        self.assertEqual(rect_area(2, 3), 6)\n"
            '        self.assertEqual(area("rect", 2, 3), 6)\n'
        )
    }
    prompt = (
        "Refactor `shapes.py`: add `square_area(a)` and `rect_area(a, b)` and make `area` call "
        "them. Keep every existing test green."
    )
    return StarterTask(
        "complex-18-refactor-shapes",
        Complexity.COMPLEX,
        prompt,
        files,
        hidden,
        ("refactor", "complex"),
        ("test_hidden_shapes.py::TestHidden::test_split",),
        ("test_shapes.py::TestShapes::test_square", "test_shapes.py::TestShapes::test_rect"),
    )


def _test_writing_task() -> StarterTask:
    files = {
        "slug.py": (
            "def slugify(text: str) -> str:\n"
            '    words = "".join(c if c.isalnum() else " " for c in text.lower()).split()\n'
            '    return "-".join(words)\n'
        ),
    }
    hidden = {
        "test_hidden_slug.py": (
            "import pathlib\nimport unittest\n\n\nclass TestHidden(unittest.TestCase):\n"
            "    def test_a_test_file_exists_and_covers_slugify(self) -> None:\n"
            '        text = pathlib.Path("test_slug.py").read_text()\n'
            '        self.assertIn("slugify", text)\n'
        )
    }
    prompt = (
        "`slug.py` has no tests. Write `test_slug.py` (unittest) covering `slugify`: spaces, "
        "punctuation, case. The tests must pass."
    )
    return StarterTask(
        "complex-19-write-tests-slug",
        Complexity.COMPLEX,
        prompt,
        files,
        hidden,
        ("write-tests", "complex"),
        ("test_hidden_slug.py::TestHidden::test_a_test_file_exists_and_covers_slugify",),
    )


def starter_tasks() -> list[StarterTask]:
    """The 20 tasks, in a fixed order."""
    tasks = [_operator_task(i, Complexity.TRIVIAL) for i in range(6)]
    tasks += [_operator_task(i, Complexity.SIMPLE) for i in range(6, 12)]
    tasks += [_operator_task(i, Complexity.MODERATE) for i in range(12, 18)]
    return [*tasks, _refactor_task(), _test_writing_task()]


def _git(repo: Path, *args: str) -> str:
    """Git through the hardened runner: nothing found in ``repo`` (a planted ``.gitconfig``,
    hooks) runs; the fixed identity and dates keep every commit's bytes the same."""
    return run_git_sync(args, repo, env=_GIT_ENV).text.strip()


def _patch(files: dict[str, str]) -> str:
    """A git-style patch creating ``files`` (the hidden tests)."""
    parts = []
    for name, text in sorted(files.items()):
        lines = text.splitlines()
        body = "".join(f"+{line}\n" for line in lines)
        parts.append(
            f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}"
        )
    return "".join(parts)


def materialize(dest: Path) -> Path:
    """Write every task's repository under ``dest`` and the suite file; returns its path."""
    dest.mkdir(parents=True, exist_ok=True)
    suite = tomlkit.document()
    suite.add(tomlkit.comment("SynthOrg starter suite (generated by synthorg.eval.starter)."))
    table = tomlkit.aot()
    for task in starter_tasks():
        repo = dest / "repos" / task.id
        if not (repo / ".git").exists():
            repo.mkdir(parents=True, exist_ok=True)
            for name, text in task.files.items():
                (repo / name).parent.mkdir(parents=True, exist_ok=True)
                (repo / name).write_text(text)
            _git(repo, "init", "-q", "--initial-branch=main")
            _git(repo, "add", "-A")
            _git(repo, "commit", "-q", "-m", f"{task.id}: starting point")
        entry = tomlkit.table()
        entry.update(
            {
                "id": task.id,
                "repository": f"repos/{task.id}",
                "base_ref": _git(repo, "rev-parse", "HEAD"),
                "prompt": task.prompt,
                "complexity": task.complexity.value,
                "tags": list(task.tags),
                "fail_to_pass": list(task.fail_to_pass),
                "pass_to_pass": list(task.pass_to_pass),
                "test_patch": _patch(task.hidden),
            }
        )
        table.append(entry)
    suite.add("task", table)
    path = dest / "suite.toml"
    path.write_text(tomlkit.dumps(suite))
    return path
