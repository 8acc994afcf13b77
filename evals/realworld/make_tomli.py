"""Build ``tomli.json``: two SWE-bench-style instances from tomli's real history (run once).

Source: https://github.com/hukkin/tomli (MIT, its LICENSE is kept in the fixture). For each fix
commit, the fixture keeps the files its tests need at the parent commit, the fix's change to
``src/`` (the gold patch) and to ``tests/`` (the test patch), and the test ids that fail before
and pass after the fix. Usage: ``python evals/realworld/make_tomli.py TOMLI_CLONE``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FILES = (
    "LICENSE",
    "pyproject.toml",
    "src/tomli/__init__.py",
    "src/tomli/_parser.py",
    "src/tomli/_re.py",
    "src/tomli/_types.py",
    "src/tomli/py.typed",
    "tests/__init__.py",
    "tests/test_error.py",
    "tests/test_misc.py",
)
INSTANCES = {
    "8b962e13490a569d4aab90076451def23ed6c6d8": {
        "instance_id": "hukkin__tomli-175",
        "FAIL_TO_PASS": ["tests/test_misc.py::TestMiscellaneous::test_incorrect_load"],
        "PASS_TO_PASS": [
            "tests/test_misc.py::TestMiscellaneous::test_load",
            "tests/test_error.py::TestError::test_line_and_col",
        ],
    },
    "4e245a4bbbefed99e550e196095ea65c851cf31d": {
        "instance_id": "hukkin__tomli-229",
        "FAIL_TO_PASS": ["tests/test_error.py::TestError::test_type_error"],
        "PASS_TO_PASS": [
            "tests/test_error.py::TestError::test_line_and_col",
            "tests/test_misc.py::TestMiscellaneous::test_incorrect_load",
        ],
    },
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def main(repo: Path) -> None:
    instances = []
    for sha, meta in INSTANCES.items():
        base = _git(repo, "rev-parse", f"{sha}^").strip()
        files = {}
        for name in FILES:
            files[name] = _git(repo, "show", f"{base}:{name}")
        instances.append(
            {
                **meta,
                "repo": "hukkin/tomli",
                "upstream_fix": sha,
                "upstream_base": base,
                "problem_statement": _git(repo, "log", "-1", "--format=%B", sha).strip(),
                "files": files,
                "patch": _git(repo, "diff", base, sha, "--", "src"),
                "test_patch": _git(repo, "diff", base, sha, "--", "tests"),
            }
        )
    out = Path(__file__).with_name("tomli.json")
    out.write_text(
        json.dumps({"source": "https://github.com/hukkin/tomli", "instances": instances}, indent=1)
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
