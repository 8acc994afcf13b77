"""Red team: each attack runs inside the bwrap sandbox and must fail (with a positive control)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from synthorg.sandbox import BwrapSandbox, ExitReason, LocalSandbox, SandboxLimits
from synthorg.sandbox.identity import host_owner, resolve_identity
from synthorg.sandbox.quota import unavailable_reason
from synthorg.service.demo import create_demo_repo

from . import redteam_probe
from .helpers import attack, collect, processes_with, py, request

pytestmark = pytest.mark.bwrap
ROOT = Path(__file__).resolve().parents[2]

# Shared by the attack programs: try each target, report what happened per target.
PROBE = """
import json, os, socket, sys
def probe(fn, *args):
    try:
        return "LEAKED:" + repr(fn(*args))[:200]
    except BaseException as exc:
        return "BLOCKED:" + type(exc).__name__
def read(p):
    with open(p) as fh:
        return fh.read()
def write(p):
    with open(p, "w") as fh:
        fh.write("pwned")
    return p
def connect(addr, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(addr)
    return "connected"
"""


def run_probes(bwrap: BwrapSandbox, workspace: Path, body: str, **kwargs: object) -> dict[str, str]:
    code = PROBE + body + "\nprint(json.dumps(results))"
    return {k: str(v) for k, v in asyncio.run(attack(bwrap, workspace, code, **kwargs)).items()}


@pytest.fixture
def home_secret() -> Iterator[tuple[Path, str]]:
    """A secret planted in the real host home directory (removed afterwards)."""
    token = secrets.token_hex(16)
    path = Path.home() / f".synthorg-redteam-{token[:8]}"
    path.write_text(token)
    try:
        yield path, token
    finally:
        path.unlink()


def test_cannot_read_a_secret_in_the_host_home(
    bwrap: BwrapSandbox, workspace: Path, home_secret: tuple[Path, str]
) -> None:
    path, token = home_secret
    assert path.read_text() == token  # control: the host can read it
    results = run_probes(
        bwrap,
        workspace,
        f"results = {{'read': probe(read, {str(path)!r}),"
        f" 'list': probe(os.listdir, {str(path.parent)!r})}}",
    )
    assert results["read"].startswith("BLOCKED"), results
    assert path.name not in results["list"] and token not in json.dumps(results)


def test_cannot_write_outside_the_worktree(
    bwrap: BwrapSandbox, workspace: Path, tmp_path: Path
) -> None:
    name = f"pwned-{secrets.token_hex(4)}"
    targets = {
        "root": f"/{name}",
        "etc": f"/etc/{name}",
        "usr": f"/usr/{name}",
        "interpreter": f"{sys.base_prefix}/{name}",
        "sibling": str(tmp_path / "data" / name),
        "host_tmp_path": str(tmp_path / name),
        "helpers": f"/opt/synthorg/{name}",
        "dotdot": f"/workspace/../{name}",
    }
    body = f"results = {{k: probe(write, p) for k, p in {targets!r}.items()}}\n"
    body += f"results['workspace'] = probe(write, '/workspace/{name}')"
    results = run_probes(bwrap, workspace, body)
    assert results.pop("workspace").startswith("LEAKED")  # control: the worktree is writable
    assert (workspace / name).read_text() == "pwned"
    assert all(v.startswith("BLOCKED") for v in results.values()), results
    for path in [*targets.values(), f"/tmp/{name}"]:
        assert not Path(path).exists(), path


def test_cannot_escape_through_symlinks_in_the_worktree(
    bwrap: BwrapSandbox, workspace: Path, home_secret: tuple[Path, str]
) -> None:
    secret, token = home_secret
    other = workspace.parent / "run-b"
    other.mkdir()
    (other / "notes.txt").write_text(token)
    (workspace / "to_secret").symlink_to(secret)
    (workspace / "to_other").symlink_to(other)
    (workspace / "to_root").symlink_to("/")
    body = f"""
results = {{
    "secret": probe(read, "/workspace/to_secret"),
    "other": probe(read, "/workspace/to_other/notes.txt"),
    "other_write": probe(write, "/workspace/to_other/evil.txt"),
    "via_root": probe(read, "/workspace/to_root{secret}"),
    "via_root_other": probe(read, "/workspace/to_root{other}/notes.txt"),
}}"""
    results = run_probes(bwrap, workspace, body)
    assert all(v.startswith("BLOCKED") for v in results.values()), results
    assert not (other / "evil.txt").exists()


async def test_cannot_reach_host_loopback_other_interfaces_or_abstract_sockets(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"host-service\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    abstract = f"\0synthorg-redteam-{secrets.token_hex(4)}"
    unix_server = await asyncio.start_unix_server(answer, abstract)
    try:
        # Controls: both listeners answer on the host.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await reader.readline() == b"host-service\n"
        writer.close()
        reader, writer = await asyncio.open_unix_connection(abstract)
        assert await reader.readline() == b"host-service\n"
        writer.close()
        host_ips = [
            a.address
            for addrs in psutil.net_if_addrs().values()
            for a in addrs
            if a.family == socket.AF_INET and not a.address.startswith("127.")
        ]
        body = f"""
results = {{"loopback": probe(connect, ("127.0.0.1", {port})),
            "abstract": probe(connect, {abstract!r}, socket.AF_UNIX)}}
for ip in {host_ips!r}:
    results["ip " + ip] = probe(connect, (ip, {port}))
results["ifaces"] = repr(socket.if_nameindex())
"""
        results = await asyncio.to_thread(run_probes, bwrap, workspace, body)
    finally:
        server.close()
        unix_server.close()
    assert results.pop("ifaces") == "[(1, 'lo')]"
    assert results and all(v.startswith("BLOCKED") for v in results.values()), results


def test_cannot_resolve_host_names(bwrap: BwrapSandbox, workspace: Path) -> None:
    body = f"""
results = {{
    "dns": probe(socket.getaddrinfo, "example.com", 80),
    "pypi": probe(socket.getaddrinfo, "pypi.org", 443),
    "host": probe(socket.getaddrinfo, {socket.gethostname()!r}, 80),
    "resolv_conf": probe(read, "/etc/resolv.conf"),
}}"""
    results = run_probes(bwrap, workspace, body)
    assert all(v.startswith("BLOCKED") for v in results.values()), results


def test_cannot_see_host_processes(bwrap: BwrapSandbox, workspace: Path) -> None:
    marker = f"synthorg-redteam-{secrets.token_hex(6)}"
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        assert processes_with(marker)  # control: the host sees it
        body = (
            """
pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
cmdlines = []
for pid in pids:
    try:
        cmdlines.append(read(f"/proc/{pid}/cmdline"))
    except OSError:
        pass
results = {"pids": pids, "cmdlines": cmdlines, "kill_host": probe(os.kill, HOST_PID, 9)}
"""
        ).replace("HOST_PID", str(host.pid))
        results = asyncio.run(attack(bwrap, workspace, PROBE + body + "print(json.dumps(results))"))
    finally:
        host.kill()
        host.wait()
    assert marker not in json.dumps(results["cmdlines"])
    assert len(results["pids"]) <= 3, results["pids"]  # bwrap's init, the program (+ a shell)
    assert str(results["kill_host"]).startswith("BLOCKED")


def test_cannot_read_gateway_keys_provider_keys_or_host_env(
    bwrap: BwrapSandbox, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = workspace.parent.parent
    token = secrets.token_hex(16)
    (data / "keys").mkdir()
    (data / "keys" / "gateway_signing.key").write_text(f"-----BEGIN PRIVATE KEY-----{token}")
    (data / "providers.toml").write_text(f'openai_api_key = "sk-{token}"')
    monkeypatch.setenv("OPENAI_API_KEY", f"sk-{token}")
    monkeypatch.setenv("SYNTHORG_GATEWAY_KEY", token)
    body = f"""
results = {{
    "signing_key": probe(read, {str(data / "keys" / "gateway_signing.key")!r}),
    "providers": probe(read, {str(data / "providers.toml")!r}),
    "relative": probe(read, "/workspace/../../keys/gateway_signing.key"),
    "data_dir": probe(os.listdir, {str(data)!r}),
    "env": repr(dict(os.environ)),
}}
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    results["environ " + pid] = probe(read, f"/proc/{{pid}}/environ")
"""
    results = run_probes(bwrap, workspace, body, env={"RUN_ONLY": "1"})
    assert token not in json.dumps(results), results
    for key in ("signing_key", "providers", "relative", "data_dir"):
        assert results[key].startswith("BLOCKED"), results
    assert "RUN_ONLY" in results["env"] and "OPENAI_API_KEY" not in results["env"]


async def test_fork_bomb_is_stopped_by_the_process_cap(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    cap = 32
    limits = SandboxLimits(max_processes=cap, wall_timeout_s=2, idle_timeout_s=None)
    req = request(
        workspace, ["bash", "-c", "echo started; :(){ :|:& };:; read; read"], limits=limits
    )
    lines, ended = await collect(bwrap, req)
    assert lines[:1] == ["started"]
    assert ended.reason is ExitReason.PROCESS_LIMIT, ended
    if bwrap.cgroups.mode != "none":
        assert ended.peak_processes is not None and ended.peak_processes <= cap, ended


async def test_memory_bomb_is_killed_and_reported(bwrap: BwrapSandbox, workspace: Path) -> None:
    limits = SandboxLimits(memory_bytes=96 * 1024**2, wall_timeout_s=20)
    code = "print('started', flush=True)\nhog = []\nwhile True: hog.append(b'x' * (8 << 20))"
    lines, ended = await collect(bwrap, request(workspace, py(code), limits=limits))
    assert lines == ["started"]
    assert ended.reason is ExitReason.MEMORY_LIMIT, ended
    assert "memory cap" in ended.message and ended.duration_s < 15


async def test_cpu_spin_is_stopped_by_the_wall_timeout(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    limits = SandboxLimits(wall_timeout_s=1.0)
    _, ended = await collect(bwrap, request(workspace, py("while True: pass"), limits=limits))
    assert ended.reason is ExitReason.TIMEOUT, ended
    # Never before the limit; the upper bound only catches a timeout that did not fire (the
    # spin never ends by itself), generous because a loaded machine delays the kill.
    assert 1.0 <= ended.duration_s < 30, ended


async def test_silent_program_is_stopped_by_the_idle_timeout(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    limits = SandboxLimits(idle_timeout_s=0.5, wall_timeout_s=30)
    code = "import time; print('hello', flush=True); time.sleep(30)"
    lines, ended = await collect(bwrap, request(workspace, py(code), limits=limits))
    assert lines == ["hello"] and ended.reason is ExitReason.IDLE_TIMEOUT, ended
    # Never before the limit; under the program's own 30 s sleep, so the idle timeout ended it.
    assert 0.5 <= ended.duration_s < 25, ended


async def test_cpu_quota_throttles_a_multi_process_spin(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    if "cpu" in bwrap.cgroups.missing:
        pytest.skip("no cpu cgroup controller on this host")
    code = """
import os, resource, time
for _ in range(2):
    if os.fork() == 0:
        end = time.monotonic() + 1.0
        while time.monotonic() < end: pass
        os._exit(0)
os.wait(); os.wait()
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime)
"""
    limits = SandboxLimits(cpu_quota=0.25, wall_timeout_s=20)
    lines, ended = await collect(bwrap, request(workspace, py(code), limits=limits))
    assert ended.reason is ExitReason.COMPLETED, ended
    cpu_used = float(lines[-1])
    assert cpu_used < 0.6, cpu_used  # unthrottled this is ~2.0 (two spinning processes)
    assert os.cpu_count()


def test_probes_do_detect_leaks_when_there_is_no_sandbox(
    local: LocalSandbox,
    workspace: Path,
    home_secret: tuple[Path, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control for the suite: the same probes report LEAKED under the unisolated backend."""
    path, token = home_secret
    monkeypatch.setenv("OPENAI_API_KEY", token)
    body = f"""
results = {{"read": probe(read, {str(path)!r}),
            "write": probe(write, {str(workspace.parent / "evil.txt")!r}),
            "ps": probe(lambda: len([p for p in os.listdir("/proc") if p.isdigit()]))}}
"""
    code = PROBE + body + "print(json.dumps(results))"
    results = asyncio.run(attack(local, workspace, code))
    assert results["read"] == f"LEAKED:{token!r}"
    assert results["write"].startswith("LEAKED") and (workspace.parent / "evil.txt").exists()
    assert int(results["ps"].removeprefix("LEAKED:")) > 3


# --- issue 12: kernel knobs, host uid, seccomp, disk, core dumps, host paths in /proc ---

KNOB = Path("/proc/sys/kernel/printk_ratelimit")


def _probe(sandbox: BwrapSandbox, workspace: Path, *flags: str, **kwargs: object) -> dict[str, Any]:
    """Run the attacker's probe (tests/sandbox/redteam_probe.py) inside; its JSON report."""
    req = request(workspace, [*py(redteam_probe.PROBE), *flags], **kwargs)  # type: ignore[arg-type]
    lines, ended = asyncio.run(collect(sandbox, req))
    assert ended.returncode == 0, (lines[-3:], ended)
    return dict(json.loads(lines[-1]))


def test_host_kernel_settings_cannot_be_written(bwrap: BwrapSandbox, workspace: Path) -> None:
    before = KNOB.read_text()
    pattern = Path("/proc/sys/kernel/core_pattern").read_text()
    changed = str(int(before) + 1)
    body = f"""
def put(path, value):
    with open(path, "w") as fh:
        fh.write(value)
    return open(path).read()
results = {{"printk": probe(put, {str(KNOB)!r}, {changed!r}),
            "core_pattern": probe(put, "/proc/sys/kernel/core_pattern", {pattern!r})}}
"""
    try:
        results = run_probes(bwrap, workspace, body)
    finally:
        if KNOB.read_text() != before:  # the old sandbox changed the host: put it back
            KNOB.write_text(before)
    assert results["printk"].startswith("BLOCKED") and results["core_pattern"].startswith(
        "BLOCKED"
    ), results
    assert KNOB.read_text() == before
    assert Path("/proc/sys/kernel/core_pattern").read_text() == pattern


@pytest.fixture
def root_secret(tmp_path: Path) -> tuple[Path, str]:
    """A 0600 root-owned file in a dir the sandbox gets as a read-only bind."""
    token = secrets.token_hex(16)
    shared = tmp_path / "shared"
    shared.mkdir()
    secret = shared / "root-only.key"
    secret.write_text(token)
    secret.chmod(0o600)
    return secret, token


def test_sandbox_runs_as_an_unprivileged_host_uid(
    bwrap: BwrapSandbox, workspace: Path, root_secret: tuple[Path, str]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the uid drop is what a root host does; run the suite as root")
    secret, token = root_secret
    body = f"""
def create(path):
    with open(path, "w") as fh:
        fh.write("made inside")
    return os.getuid()
results = {{"secret": probe(read, {str(secret)!r}), "create": probe(create, "/workspace/made.txt")}}
"""
    results = run_probes(bwrap, workspace, body, read_only_binds=[secret.parent])
    assert results["secret"].startswith("BLOCKED"), results  # root read it before the drop
    made = (workspace / "made.txt").stat()
    assert results["create"] == f"LEAKED:{bwrap.identity.uid}" and bwrap.identity.uid != 0
    # What it made lands as the host's (upper.py), not as the uid it ran as (idmap.py).
    assert (made.st_uid, made.st_gid) == host_owner()
    # Control: the same probe under the explicit root mode reads the secret.
    as_root = BwrapSandbox(identity=resolve_identity("", allow_root=True))
    again = run_probes(as_root, workspace, body, read_only_binds=[secret.parent])
    assert again["secret"] == f"LEAKED:{token!r}"


def test_seccomp_refuses_namespace_mount_trace_and_kernel_syscalls(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    report = _probe(bwrap, workspace, env={"REDTEAM_FILL_BYTES": str(1 << 20)})
    assert report["getpid"] is True  # control: ordinary syscalls work
    assert "Seccomp:\t2" in report["seccomp_status"], report["seccomp_status"]
    assert report["denied"] and set(report["denied"].values()) == {"EPERM"}, report["denied"]


def test_disk_quota_refuses_writes_with_enospc_and_the_run_goes_on(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    if why := unavailable_reason():
        pytest.skip(f"no worktree quota on this host: {why}")
    mib = 1 << 20
    limits = SandboxLimits(disk_bytes=8 * mib, tmp_bytes=4 * mib, wall_timeout_s=60)
    env = {"REDTEAM_FILL_BYTES": str(64 * mib)}
    report = _probe(bwrap, workspace, "--keep-fill", limits=limits, env=env)
    assert report["fill_workspace"]["error"] == "ENOSPC", report["fill_workspace"]
    assert report["fill_tmp"]["error"] == "ENOSPC", report["fill_tmp"]
    assert report["fill_tmp"]["written"] <= 4 * mib
    assert report["after_fill"] == "the program went on"
    # Host side: what reached the worktree is bounded by the quota (allowance + ext4 slack),
    # and the worktree is an ordinary directory again.
    landed = (workspace / "redteam-fill.bin").stat().st_size
    assert 0 < landed <= 12 * mib, landed
    assert not workspace.is_mount()


def test_a_crash_leaves_no_core_file(bwrap: BwrapSandbox, workspace: Path) -> None:
    report = _probe(bwrap, workspace, env={"REDTEAM_FILL_BYTES": str(1 << 20)})
    assert report["crash_status"] == -signal.SIGSEGV
    assert report["core_limit"] == [0, 0] and report["core_files"] == [], report
    assert not [p for p in workspace.iterdir() if p.name.startswith("core")]


def test_no_host_path_or_id_in_proc(bwrap: BwrapSandbox, workspace: Path) -> None:
    conversation = f"conv-{secrets.token_hex(6)}"
    home = workspace.parent.parent
    report = _probe(
        bwrap, workspace, conversation_id=conversation, env={"REDTEAM_FILL_BYTES": str(1 << 20)}
    )
    seen = {k: json.dumps(report[k]) for k in ("cmdline_1", "cmdlines", "mountinfo", "cgroup")}
    seen["environ_1"] = report["environ_1"]
    for secret in (str(home), str(workspace), conversation, workspace.name):
        leaks = [k for k, text in seen.items() if secret in text]
        assert not leaks, (secret, {k: seen[k] for k in leaks})


@pytest.mark.slow
def test_the_attacks_fail_through_a_real_synthorg_run(tmp_path: Path) -> None:
    """A scripted model runs the probe through the terminal tool of an ordinary run."""
    home = tmp_path / "home"
    repo = create_demo_repo(tmp_path / "calc")
    config = tmp_path / "synthorg.toml"
    config.write_text(
        '[[gateway.providers]]\nname = "scripted"\nkind = "scripted"\nmodels = ["m"]\n'
        'script = "tests.sandbox.redteam_probe:attack_script"\n[run]\nmodel = "m"\n'
        f"[sandbox.limits]\ndisk_bytes = {8 << 20}\ntmp_bytes = {4 << 20}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTHORG")}
    env.update(SYNTHORG_HOME=str(home), PYTHONPATH=str(ROOT), COLUMNS="200")
    argv = ["run", "probe", "--repo", str(repo), "-c", str(config)]
    done = subprocess.run(
        [sys.executable, "-m", "synthorg.cli.app", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    conversation = re.search(r"conversation (conv-[0-9a-f]+)", output)
    assert conversation, output
    worktree = next((home / "worktrees" / conversation.group(1)).iterdir())
    report = json.loads((worktree / ".redteam.json").read_text())

    assert set(report["knobs"].values()) <= {"EROFS", "EACCES"}, report["knobs"]
    assert set(report["denied"].values()) == {"EPERM"}, report["denied"]
    assert report["fill_workspace"]["error"] == "ENOSPC" and report["fill_tmp"]["error"] == "ENOSPC"
    assert report["core_limit"] == [0, 0] and report["core_files"] == []
    owned = (worktree / "redteam-owned.txt").stat()
    assert report["uid"] != 0 and (owned.st_uid, owned.st_gid) == host_owner()
    seen = json.dumps([report[k] for k in ("cmdline_1", "cmdlines", "mountinfo", "cgroup")])
    for secret in (str(home), str(worktree), conversation.group(1)):
        assert secret not in seen and secret not in report["environ_1"], secret
