"""Branch names from the caller: git check-ref-format's rules, plus no option-like or blank names.

Every branch, head or base a tool receives passes through ``check_branch_name`` before it reaches
git or the forge: a name git would reject, one that looks like an option (``--upload-pack=x``),
or one carrying whitespace or control characters (``main\\n``) is refused with the reason.
"""

from __future__ import annotations

import re

from synthorg.mcp.errors import ToolRefusedError

MAX_REF_LENGTH = 255
RUN_BRANCH_PREFIX = "synthorg/"
"""Every run works on ``synthorg/<conversation id>``; no such branch is a pull request's base."""
# check-ref-format rule 4/5/10: control characters, space, ~ ^ : ? * [ and backslash.
_FORBIDDEN_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


def ref_name_problem(name: str) -> str | None:
    """Why ``name`` is not an acceptable branch name, or None when it is."""
    if not name:
        return "it is empty"
    if len(name) > MAX_REF_LENGTH:
        return f"it is longer than {MAX_REF_LENGTH} characters"
    if name.startswith("-"):
        return "it starts with '-' (it would read as an option)"
    if any(ch.isspace() for ch in name) or not name.isprintable():
        return "it contains whitespace or a control character"
    bad = _FORBIDDEN_CHARS.search(name)
    if bad:
        return f"it contains {bad.group()!r}"
    if name == "@":
        return "it is '@'"
    for what, found in (("'..'", ".." in name), ("'@{'", "@{" in name), ("'//'", "//" in name)):
        if found:
            return f"it contains {what}"
    if name.startswith("/") or name.endswith("/"):
        return "it starts or ends with '/'"
    if name.endswith("."):
        return "it ends with '.'"
    for component in name.split("/"):
        if component.startswith("."):
            return f"its component {component!r} starts with '.'"
        if component.endswith(".lock"):
            return f"its component {component!r} ends with '.lock'"
    return None


def check_branch_name(name: str, what: str = "branch") -> str:
    """``name`` when it is a valid branch name; ToolRefusedError saying why otherwise."""
    problem = ref_name_problem(name)
    if problem is not None:
        raise ToolRefusedError(f"{what} {name!r} is not a valid branch name: {problem}")
    return name
