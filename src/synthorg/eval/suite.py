"""Evaluation suites: SWE-bench JSONL rows and native TOML/YAML task files, validated whole.

A suite is read completely before anything runs: every bad entry is reported with its file,
line and field, and one bad entry stops the whole suite (a half-read suite would make the
statistics lie about what was compared).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from synthorg.domain import Complexity
from synthorg.errors import UsageError
from synthorg.eval.judge import pytest_args

SWEBENCH_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
"""The published SWE-bench instance fields a row must carry."""


class SuiteError(UsageError):
    """A suite file with bad entries; ``problems`` lists each as 'file:line: field: reason'."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        listing = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"the suite has {len(problems)} bad entr(y/ies); nothing ran:\n{listing}")


class HiddenCheck(BaseModel):
    """How a result is judged; never shown to the agent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: str | None = Field(None, description="Shell command; exit 0 means resolved.")
    fail_to_pass: tuple[str, ...] = Field((), description="Test ids that must start passing.")
    pass_to_pass: tuple[str, ...] = Field((), description="Test ids that must keep passing.")
    test_patch: str = Field("", description="Patch applied before the check (hidden tests).")
    test_command: str | None = Field(
        None, description="Hint: 'pytest OPTIONS' for the judge's pytest (ids are appended)."
    )
    test_env: dict[str, str] = Field(
        default_factory=dict, description="Hint: environment variables of the judged run."
    )

    @field_validator("test_env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or "\0" in item:
                raise ValueError(f"environment variable {key!r} has an invalid name or value")
        return value

    @model_validator(mode="after")
    def _something_to_check(self) -> HiddenCheck:
        if self.command is None and not self.fail_to_pass:
            raise ValueError("give 'check' (a command) or FAIL_TO_PASS test ids")
        pytest_args(self.test_command)  # a runner the judge cannot run is refused at load
        return self


class EvalTask(BaseModel):
    """One task of a suite: where, from which commit, what to ask, how to judge."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._/-]+$")
    repository: str = Field(min_length=1, description="Local path or git URL of the repository.")
    base_ref: str = Field(min_length=1, description="Commit or branch the run starts from.")
    prompt: str = Field(min_length=1, description="What the agent is asked.")
    check: HiddenCheck
    complexity: Complexity = Complexity.MODERATE
    tags: tuple[str, ...] = ()

    @field_validator("base_ref")
    @classmethod
    def _plain_ref(cls, value: str) -> str:
        if value.startswith("-") or any(c.isspace() or ord(c) < 32 for c in value):
            raise ValueError("a ref may not start with '-' or hold whitespace/control characters")
        return value


class Suite(BaseModel):
    """A validated list of tasks with unique ids."""

    model_config = ConfigDict(frozen=True)

    name: str
    tasks: tuple[EvalTask, ...]


def load_suite(path: Path, repo_map: Mapping[str, str] | None = None) -> Suite:
    """Read ``path`` by its suffix: ``.jsonl`` (SWE-bench), ``.toml`` / ``.yaml`` / ``.yml``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read the suite {path}: {exc.strerror or exc}") from exc
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        tasks = _swebench_tasks(path, text, repo_map or {})
    elif suffix in (".toml", ".yaml", ".yml"):
        tasks = _native_tasks(path, text, base=path.parent)
    else:
        raise UsageError(f"{path}: a suite is .jsonl (SWE-bench rows), .toml or .yaml")
    duplicates = sorted({t.id for t in tasks if sum(u.id == t.id for u in tasks) > 1})
    if duplicates:
        raise SuiteError([f"{path}: id: duplicated: {', '.join(duplicates)}"])
    if not tasks:
        raise SuiteError([f"{path}: the suite holds no task"])
    return Suite(name=path.stem, tasks=tuple(tasks))


def _string_list(value: Any) -> tuple[str, ...]:
    """Published datasets store the test lists as JSON strings; accept both forms."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of test ids (or a JSON string of one)")
    return tuple(value)


def _swebench_tasks(path: Path, text: str, repo_map: Mapping[str, str]) -> list[EvalTask]:
    problems: list[str] = []
    tasks: list[EvalTask] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: (row): not JSON ({exc.msg})")
            continue
        if not isinstance(row, dict):
            problems.append(f"{where}: (row): not a JSON object")
            continue
        missing = [f for f in SWEBENCH_FIELDS if f not in row]
        problems.extend(f"{where}: {f}: missing" for f in missing)
        if missing:
            continue
        repo = row["repo"]
        if repo not in repo_map:
            problems.append(f"{where}: repo: {repo!r} has no local path or URL in the repo map")
            continue
        try:
            check = HiddenCheck(
                fail_to_pass=_string_list(row["FAIL_TO_PASS"]),
                pass_to_pass=_string_list(row["PASS_TO_PASS"]),
                test_patch=row["test_patch"],
                test_command=row.get("test_command"),
                test_env=row.get("test_env") or {},
            )
            tasks.append(
                EvalTask(
                    id=row["instance_id"],
                    repository=repo_map[repo],
                    base_ref=row["base_commit"],
                    prompt=row["problem_statement"],
                    check=check,
                    complexity=row.get("complexity", Complexity.MODERATE),
                    tags=tuple(row.get("tags", ())),
                )
            )
        except (ValidationError, ValueError, json.JSONDecodeError) as exc:
            problems.extend(_describe(where, exc))
    if problems:
        raise SuiteError(problems)
    return tasks


def _native_tasks(path: Path, text: str, base: Path) -> list[EvalTask]:
    entries, lines = _parse_native(path, text)
    problems: list[str] = []
    tasks: list[EvalTask] = []
    for index, entry in enumerate(entries):
        where = f"{path}:{lines[index]}" if index < len(lines) else f"{path}:task[{index}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: (task): not a table/mapping")
            continue
        entry = dict(entry)
        check = {
            key: entry.pop(key)
            for key in (
                "check",
                "fail_to_pass",
                "pass_to_pass",
                "test_patch",
                "test_command",
                "test_env",
            )
            if key in entry
        }
        if "check" in check:
            check["command"] = check.pop("check")
        repository = str(entry.get("repository", ""))
        if repository and "://" not in repository and not Path(repository).is_absolute():
            entry["repository"] = str((base / repository).resolve())
        try:
            tasks.append(EvalTask.model_validate({**entry, "check": check}))
        except ValidationError as exc:
            problems.extend(_describe(where, exc))
    if problems:
        raise SuiteError(problems)
    return tasks


def _parse_native(path: Path, text: str) -> tuple[list[Any], list[int]]:
    """The task entries and the line each starts on (for error messages)."""
    if path.suffix.lower() == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SuiteError([f"{path}: (file): not TOML ({exc})"]) from exc
        lines = [n for n, line in enumerate(text.splitlines(), 1) if line.strip() == "[[task]]"]
        return list(data.get("task", [])), lines
    import yaml  # only YAML suites need it

    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise SuiteError([f"{path}: (file): not YAML ({exc})"]) from exc
    entries = data.get("tasks", []) if isinstance(data, dict) else []
    starts: list[int] = []
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            if key.value == "tasks" and isinstance(value, yaml.SequenceNode):
                starts = [item.start_mark.line + 1 for item in value.value]
    return list(entries) if isinstance(entries, list) else [entries], starts


def _describe(where: str, exc: Exception) -> Iterable[str]:
    if isinstance(exc, ValidationError):
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"]) or "(task)"
            yield f"{where}: {field}: {error['msg']}"
    else:
        yield f"{where}: (row): {exc}"
