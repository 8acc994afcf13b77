"""``synthorg sandbox``: show a backend's boundary and prove it live on this host."""

from __future__ import annotations

import json
import socket
import sys
import tempfile
import time
from pathlib import Path

import typer
from rich.markup import escape

from synthorg.cli.common import console, fail, run_async
from synthorg.errors import SynthOrgError
from synthorg.sandbox import (
    ForwardedEndpoint,
    SandboxLimits,
    SandboxRequest,
    SandboxStreamer,
    make_sandbox,
    render_boundary,
)

app = typer.Typer(help="Sandbox backends: boundary table and a live check.", no_args_is_help=True)

BackendOption = typer.Option("bwrap", "--backend", help="bwrap (default) or local.")
AllowLocalOption = typer.Option(False, "--allow-local", help="Opt in to the unisolated backend.")

# Runs inside: reports what the program can see and do. Stdlib only.
_PROBE = r"""
import ctypes, errno, json, os, resource, socket
def can(fn):
    try:
        fn()
        return True
    except OSError:
        return False
def refused(fn):
    try:
        fn()
        return "allowed"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
def read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""
def rewrite(path):
    value = read(path)
    with open(path, "w") as fh:
        fh.write(value)
def fork_unshare():
    pid = os.fork()
    if pid == 0:
        try:
            os.unshare(os.CLONE_NEWUSER)
            os._exit(0)
        except OSError as exc:
            os._exit(exc.errno)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        raise OSError(code, os.strerror(code))
def persona(value):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.personality.restype = ctypes.c_int
    if libc.personality(ctypes.c_ulong(value)) == -1:
        raise OSError(ctypes.get_errno(), "personality")
    libc.personality(ctypes.c_ulong(0))
status = dict(l.split(":", 1) for l in read("/proc/self/status").splitlines() if ":" in l)
ws, tmp = os.statvfs(os.environ["PROBE_WS"]), os.statvfs("/tmp")
dotgit = os.path.join(os.environ["PROBE_WS"], ".git")
print(json.dumps({
    "interfaces": [name for _, name in socket.if_nameindex()],
    "home_entries": sorted(os.listdir(os.environ["PROBE_HOME"])) if can(
        lambda: os.listdir(os.environ["PROBE_HOME"])) else [],
    "processes": len([p for p in os.listdir("/proc") if p.isdigit()]),
    "root_writable": can(lambda: open("/probe-write", "w").close()),
    "env": sorted(os.environ),
    "uid": os.getuid(),
    "proc_sys_write": refused(lambda: rewrite("/proc/sys/kernel/printk_ratelimit")),
    "seccomp": status.get("Seccomp", "").strip(),
    "unshare_user": refused(fork_unshare),
    "no_aslr_persona": refused(lambda: persona(0x0040000)),
    "core_limit": list(resource.getrlimit(resource.RLIMIT_CORE)),
    "workspace_bytes": ws.f_blocks * ws.f_frsize,
    "tmp_bytes": tmp.f_blocks * tmp.f_frsize,
    "cmdline_1": read("/proc/1/cmdline").replace("\0", " "),
    "mountinfo": read("/proc/self/mountinfo"),
    "dotgit": read(dotgit),
    "dotgit_write": refused(lambda: rewrite(dotgit)),
    "dotgit_rename": refused(lambda: os.rename(dotgit, dotgit + "-moved")),
}))
"""
_CHECK_ID = "sandbox-check"


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


async def _probe(
    sandbox: SandboxStreamer, workspace: Path, limits: SandboxLimits
) -> tuple[dict[str, object], float]:
    # A state dir, a runtime bind and a forwarded socket beside the worktree, named like a
    # run's: mountinfo must name none of them.
    runtime = workspace.parent / "runtime"
    runtime.mkdir(exist_ok=True)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(workspace.parent / "probe.sock"))
    listener.listen()
    endpoint = ForwardedEndpoint(
        name="probe", host_socket=workspace.parent / "probe.sock", sandbox_port=18999
    )
    request = SandboxRequest(
        argv=[sandbox.python_inside(), "-I", "-S", "-c", _PROBE],
        workspace=workspace,
        state_dir=workspace.parent / "state" / _CHECK_ID,
        runtime_binds=[runtime],
        endpoints=[endpoint],
        limits=limits,
        conversation_id=_CHECK_ID,
    )
    inside = sandbox.workspace_path_inside(request)
    env = {"PROBE_HOME": str(Path.home()), "PROBE_WS": inside}
    request = request.model_copy(update={"env": env})
    started = time.perf_counter()
    lines: list[str] = []
    with listener:
        async with sandbox.stream(request, "{}") as proc:
            async for line in proc:
                lines.append(line)
    if proc.exit is None or proc.exit.returncode != 0 or not lines:
        message = proc.exit.message if proc.exit else "no exit"
        raise SynthOrgError(f"the probe failed: {message}: {proc.stderr_tail.strip()}")
    return dict(json.loads(lines[-1])), time.perf_counter() - started


def _verdicts(
    seen: dict[str, object], workspace: Path, limits: SandboxLimits
) -> list[tuple[str, bool, str]]:
    """(what, holds, evidence) for every boundary the probe exercised."""
    home_entries = seen["home_entries"]
    assert isinstance(home_entries, list)
    leaks = sorted(home_entries)
    processes = seen["processes"]
    visible = f"{seen['cmdline_1']}\n{seen['mountinfo']}"
    # The worktree's, state dir's, runtime bind's and socket's host dir, the check's id, the
    # host home and the base interpreter's install dir (/root/.pyenv/...).
    hidden = (
        str(workspace.parent),
        _CHECK_ID,
        f"{Path.home()}/",
        str(Path(sys.base_prefix).resolve()),
    )
    revealed = [s for s in hidden if s in visible]
    allowance = limits.disk_bytes
    ws_bytes = seen["workspace_bytes"]
    assert isinstance(ws_bytes, int)
    return [
        ("network", seen["interfaces"] == ["lo"], f"interfaces {seen['interfaces']}"),
        ("host home", not leaks, f"visible entries {leaks}" if leaks else "hidden"),
        ("root filesystem", not seen["root_writable"], "read-only" if not seen["root_writable"]
         else "WRITABLE"),
        ("processes", isinstance(processes, int) and processes <= 3, f"{processes} visible"),
        ("uid", seen["uid"] != 0, f"runs as uid {seen['uid']}"),
        ("/proc/sys", seen["proc_sys_write"] != "allowed",
         f"write to kernel/printk_ratelimit: {seen['proc_sys_write']}"),
        ("seccomp", seen["seccomp"] == "2" and "allowed" not in (
            seen["unshare_user"], seen["no_aslr_persona"]),
         f"Seccomp: {seen['seccomp']}; unshare(CLONE_NEWUSER): {seen['unshare_user']}; "
         f"personality(ADDR_NO_RANDOMIZE): {seen['no_aslr_persona']}"),
        ("core files", seen["core_limit"] == [0, 0], f"RLIMIT_CORE {seen['core_limit']}"),
        ("/tmp size", seen["tmp_bytes"] == limits.tmp_bytes, f"{seen['tmp_bytes']} bytes"),
        ("worktree quota", allowance is not None and ws_bytes < allowance + 64 * 1024**2,
         f"/workspace filesystem of {ws_bytes} bytes (allowance {allowance})"),
        ("host paths and ids", not revealed,
         f"/proc/1/cmdline and mountinfo show {revealed}" if revealed else "none shown"),
        ("worktree .git", str(workspace.parent) not in str(seen["dotgit"])
         and "allowed" not in (seen["dotgit_write"], seen["dotgit_rename"]),
         f"reads {str(seen['dotgit']).strip()!r}; write: {seen['dotgit_write']}; "
         f"rename: {seen['dotgit_rename']}"),
    ]  # fmt: skip


@app.command()
def check(backend: str = BackendOption, allow_local: bool = AllowLocalOption) -> None:
    """Start a real sandbox and report, boundary by boundary, what a program inside can do."""
    sandbox = _backend(backend, allow_local)
    decl = sandbox.boundary()
    console.print(escape(render_boundary(decl)))
    limits = SandboxLimits(wall_timeout_s=30, disk_bytes=64 * 1024**2)
    # Disk-backed like a data dir (and beside the views dir), not a RAM /tmp.
    with tempfile.TemporaryDirectory(prefix="synthorg-sandbox-check-", dir="/var/tmp") as tmp:
        workspace = Path(tmp) / "worktree"
        workspace.mkdir()
        # Like a worktree's: the .git file names the host repository (it must not show).
        (workspace / ".git").write_text(f"gitdir: {tmp}/repo/.git/worktrees/worktree\n")
        try:
            seen, elapsed = run_async(_probe(sandbox, workspace, limits))
        except SynthOrgError as exc:
            fail(str(exc), code=1)
        verdicts = _verdicts(seen, workspace, limits)
    console.print(f"live probe ({elapsed * 1000:.0f} ms):")
    for what, holds, evidence in verdicts:
        mark = "[green]holds[/green]" if holds else "[red]FAILS[/red]"
        console.print(f"  {what:<20} {mark}  {escape(evidence)}")
    isolated = all(holds for _, holds, _ in verdicts)
    if isolated:
        console.print("[green]isolated[/green]: every boundary above holds on this host")
    else:
        failed = ", ".join(what for what, holds, _ in verdicts if not holds)
        console.print(f"[red]NOT isolated[/red]: {escape(failed)} do not hold")
    if not isolated and sandbox.name != "local":
        raise typer.Exit(1)
