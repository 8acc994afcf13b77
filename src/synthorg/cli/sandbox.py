"""``synthorg sandbox``: show a backend's boundary and prove it live on this host."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import typer
from rich.markup import escape

from synthorg.cli.common import console, fail, run_async
from synthorg.errors import SynthOrgError
from synthorg.sandbox import (
    SandboxLimits,
    SandboxRequest,
    SandboxStreamer,
    make_sandbox,
    render_boundary,
)

app = typer.Typer(help="Sandbox backends: boundary table and a live check.", no_args_is_help=True)

BackendOption = typer.Option("bwrap", "--backend", help="bwrap (default) or local.")
AllowLocalOption = typer.Option(False, "--allow-local", help="Opt in to the unisolated backend.")

# Runs inside: reports what the program can see. Stdlib only.
_PROBE = """
import json, os, socket
def can(fn):
    try:
        fn()
        return True
    except OSError:
        return False
print(json.dumps({
    "interfaces": [name for _, name in socket.if_nameindex()],
    "home_entries": sorted(os.listdir(os.environ["PROBE_HOME"])) if can(
        lambda: os.listdir(os.environ["PROBE_HOME"])) else [],
    "processes": len([p for p in os.listdir("/proc") if p.isdigit()]),
    "root_writable": can(lambda: open("/probe-write", "w").close()),
    "env": sorted(os.environ),
}))
"""


@app.callback()
def _group() -> None:
    """Sandbox backends: boundary table and a live check."""


def _backend(name: str, allow_local: bool) -> SandboxStreamer:
    try:
        return make_sandbox(name, allow_local=allow_local)
    except SynthOrgError as exc:
        fail(str(exc))


@app.command()
def boundary(
    backend: str = BackendOption,
    allow_local: bool = AllowLocalOption,
    as_json: bool = typer.Option(False, "--json", help="Print the declaration as JSON."),
) -> None:
    """Print what the backend enforces, as it holds on this host."""
    decl = _backend(backend, allow_local).boundary()
    if as_json:
        console.print_json(decl.model_dump_json())
    else:
        console.print(escape(render_boundary(decl)))


async def _probe(sandbox: SandboxStreamer, workspace: Path) -> tuple[dict[str, object], float]:
    request = SandboxRequest(
        argv=[sandbox.python_inside(), "-I", "-S", "-c", _PROBE],
        workspace=workspace,
        env={"PROBE_HOME": str(Path.home())},
        limits=SandboxLimits(wall_timeout_s=30),
        conversation_id="sandbox-check",
    )
    started = time.perf_counter()
    lines: list[str] = []
    async with sandbox.stream(request, "{}") as proc:
        async for line in proc:
            lines.append(line)
    if proc.exit is None or proc.exit.returncode != 0 or not lines:
        message = proc.exit.message if proc.exit else "no exit"
        raise SynthOrgError(f"the probe failed: {message}: {proc.stderr_tail.strip()}")
    return dict(json.loads(lines[-1])), time.perf_counter() - started


def _bound_paths() -> list[Path]:
    from synthorg.sandbox.bwrap import host_python_dir

    return [host_python_dir()]


@app.command()
def check(backend: str = BackendOption, allow_local: bool = AllowLocalOption) -> None:
    """Start a real sandbox and report what a program inside can reach."""
    sandbox = _backend(backend, allow_local)
    decl = sandbox.boundary()
    console.print(escape(render_boundary(decl)))
    with tempfile.TemporaryDirectory(prefix="synthorg-sandbox-check-") as tmp:
        try:
            seen, elapsed = run_async(_probe(sandbox, Path(tmp)))
        except SynthOrgError as exc:
            fail(str(exc), code=1)
    # The interpreter may live under the home (pyenv): its top dir is bound, nothing else.
    home = Path.home()
    needed = {p.relative_to(home).parts[0] for p in _bound_paths() if p.is_relative_to(home)}
    home_entries = seen["home_entries"]
    assert isinstance(home_entries, list)
    seen["home_leaks"] = sorted(set(home_entries) - needed)
    isolated = (
        seen["interfaces"] == ["lo"]
        and not seen["home_leaks"]
        and not seen["root_writable"]
        and isinstance(seen["processes"], int)
        and seen["processes"] <= 3
    )
    console.print(f"live probe ({elapsed * 1000:.0f} ms): {escape(json.dumps(seen))}")
    if isolated:
        console.print("[green]isolated[/green]: only lo, host home hidden, / read-only")
    else:
        console.print("[red]NOT isolated[/red]: the program inside sees the host")
    if not isolated and sandbox.name != "local":
        raise typer.Exit(1)
