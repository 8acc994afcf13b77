"""Optional extras: which import comes with which ``synthorg[extra]``, and the line to install it.

A plain ``pip install synthorg`` runs the embedded engine on SQLite; PostgreSQL, Temporal and the
plotted eval report are extras, imported only where used. A missing one ends the command with
this hint instead of a traceback (the CLI's environment_problem, doctor).
"""

from __future__ import annotations

# Top-level import name -> the extra that installs it ([project.optional-dependencies]).
EXTRA_OF = {
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "temporalio": "temporal",
    "plotly": "reports",
}


def install_hint(extra: str) -> str:
    """The command that adds ``extra`` to an installed SynthOrg (a clone: ``uv sync --extra``)."""
    return f"pip install 'synthorg[{extra}]' (from a clone: uv sync --extra {extra})"


def missing_extra(exc: BaseException) -> str | None:
    """What to install when ``exc`` is an extra's module missing; None for any other error."""
    if not isinstance(exc, ModuleNotFoundError):
        return None
    module = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF.get(module)
    if extra is None:
        return None
    return f"{module} is not installed; it comes with the [{extra}] extra: {install_hint(extra)}"


def require(module: str) -> None:
    """Fail before any work when an extra's ``module`` is absent (the CLI prints the hint)."""
    from importlib.util import find_spec

    if find_spec(module) is None:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)
