"""Factory, request validation, boundary declarations, cgroup handling and start failures."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pydantic
import pytest

from synthorg.errors import UsageError
from synthorg.sandbox import (
    BoundaryStatus,
    BwrapSandbox,
    ExitReason,
    ForwardedEndpoint,
    LocalSandbox,
    SandboxLimits,
    SandboxOptInError,
    SandboxProcess,
    SandboxStartError,
    SandboxStreamer,
    SandboxUnavailableError,
    make_sandbox,
    render_boundary,
)
from synthorg.sandbox.cgroups import (
    CgroupMode,
    CgroupSupport,
    RunCgroup,
    cgroup_label,
    detect_cgroups,
)
from synthorg.sandbox.identity import resolve_identity

from .helpers import collect, py, request


def test_factory_fails_loud_for_unknown_backends_and_local_without_opt_in() -> None:
    with pytest.raises(UsageError, match="unknown sandbox backend 'docker'"):
        make_sandbox("docker", allow_local=True)
    with pytest.raises(SandboxOptInError, match="no isolation"):
        make_sandbox("local", allow_local=False)
    assert isinstance(make_sandbox("local", allow_local=True), LocalSandbox)


def test_missing_bwrap_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        BwrapSandbox()


def test_backends_satisfy_the_protocols(bwrap: BwrapSandbox, local: LocalSandbox) -> None:
    assert isinstance(bwrap, SandboxStreamer) and isinstance(local, SandboxStreamer)


def test_request_validation(tmp_path: Path) -> None:
    with pytest.raises(pydantic.ValidationError, match="absolute"):
        request(Path("relative"), ["true"])
    ep = ForwardedEndpoint(name="gateway", host_socket=tmp_path / "g.sock", sandbox_port=18080)
    with pytest.raises(pydantic.ValidationError, match="distinct"):
        request(tmp_path, ["true"], endpoints=[ep, ep])
    with pytest.raises(pydantic.ValidationError):
        ForwardedEndpoint(name="gateway", host_socket=tmp_path, sandbox_port=80)
    with pytest.raises(pydantic.ValidationError):
        request(tmp_path, [])


def test_local_boundary_declares_nothing_enforced(local: LocalSandbox) -> None:
    decl = local.boundary()
    assert {r.boundary for r in decl.rows} == {
        "filesystem",
        "identity",
        "network",
        "processes",
        "resources",
        "secrets",
    }
    assert all(r.status is BoundaryStatus.NOT_ENFORCED for r in decl.rows)
    assert len(decl.warnings) == 6 and not decl.fully_enforced


@pytest.mark.bwrap
def test_bwrap_boundary_reflects_this_host(bwrap: BwrapSandbox) -> None:
    decl = bwrap.boundary()
    rows = {r.boundary: r for r in decl.rows}
    assert len(rows) == 6 and rows["network"].status is BoundaryStatus.ENFORCED
    assert rows["identity"].status is BoundaryStatus.ENFORCED, rows["identity"]
    assert rows["processes"].status is BoundaryStatus.ENFORCED
    assert "seccomp" in rows["processes"].on_this_host
    # The worktree from its own filesystem, the rest from neutral sources: nothing to warn.
    assert rows["filesystem"].status is BoundaryStatus.ENFORCED, rows["filesystem"]
    resources = rows["resources"]
    assert "loop ext4" in resources.on_this_host, resources  # the worktree quota (as root)
    if bwrap.cgroups.mode is CgroupMode.NONE or bwrap.cgroups.missing:
        assert resources.status is BoundaryStatus.WEAKER and resources.warning
    else:
        assert resources.status is BoundaryStatus.ENFORCED
        assert bwrap.cgroups.mode.value in resources.on_this_host
    text = render_boundary(decl)
    assert "sandbox backend: bwrap" in text and "resources" in text


def test_boundary_warns_when_bwrap_cannot_run(tmp_path: Path) -> None:
    from synthorg.sandbox.boundary import bwrap_boundary

    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    decl = bwrap_boundary(str(fake), detect_cgroups(), resolve_identity(), seccomp=True)
    assert all(r.status is BoundaryStatus.NOT_ENFORCED for r in decl.rows)
    assert "nothing is enforced" in render_boundary(decl)


def test_weaker_resources_row_without_cgroups() -> None:
    from synthorg.sandbox.boundary import _resources_row

    row = _resources_row(CgroupSupport(CgroupMode.NONE, detail="none here"), resolve_identity())
    assert row.status is BoundaryStatus.WEAKER
    assert "RLIMIT_NPROC" in row.on_this_host and "SYNTHORG_SANDBOX_CGROUP" in (row.warning or "")


@pytest.mark.bwrap
def test_run_cgroup_applies_limits_and_is_removed() -> None:
    support = detect_cgroups()
    if support.mode is not CgroupMode.V1:
        pytest.skip("this check reads cgroup v1 files")
    limits = SandboxLimits(max_processes=17, memory_bytes=64 * 1024**2, cpu_quota=0.5)
    cg = RunCgroup(support, "conv/../id", limits)
    try:
        assert all(d.parent == support.parents[c] for c, d in cg.dirs.items())
        assert (cg.dirs["pids"] / "pids.max").read_text().strip() == "17"
        mem = (cg.dirs["memory"] / "memory.limit_in_bytes").read_text()
        assert int(mem) == 64 * 1024**2
        assert (cg.dirs["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert not cg.oom_killed() and not cg.pids_cap_hit()
    finally:
        assert cg.remove_now()
    assert not any(d.exists() for d in cg.dirs.values())


@pytest.mark.bwrap
def test_each_run_weighs_one_host_process_against_the_host() -> None:
    """All run cgroups share one parent, which the kernel weighs like one process against
    the host's others: its weight must grow with the runs under it (else 32 runs' commands
    share one process's slice of a busy host) and fall back when they end."""
    support = detect_cgroups()
    parent = support.parents["cpu"]
    v2 = support.mode is CgroupMode.V2
    one = 100 if v2 else 1024

    def weight() -> int:
        return int((parent / ("cpu.weight" if v2 else "cpu.shares")).read_text())

    def runs() -> int:  # other processes on this host may hold runs under the same parent
        return sum(1 for p in parent.iterdir() if p.name.startswith("sb-"))

    cgs = [RunCgroup(support, f"weigh-{i}", SandboxLimits()) for i in range(3)]
    try:
        assert weight() >= 3 * one, (weight(), runs())
    finally:
        for cg in cgs:
            assert cg.remove_now()
    assert weight() < 3 * one or runs() >= 3


@pytest.mark.bwrap
async def test_start_failures_are_reported_and_clean(
    bwrap: BwrapSandbox, workspace: Path, tmp_path: Path
) -> None:
    with pytest.raises(SandboxStartError, match="does not exist"):
        await collect(bwrap, request(workspace, ["true"], read_only_binds=[tmp_path / "nope"]))
    with pytest.raises(SandboxStartError, match="not a directory"):
        await collect(bwrap, request(tmp_path / "missing", ["true"]))
    ep = ForwardedEndpoint(name="gw", host_socket=tmp_path / "absent.sock", sandbox_port=2000)
    with pytest.raises(SandboxStartError, match="is the service running"):
        await collect(bwrap, request(workspace, ["true"], endpoints=[ep]))
    broken = BwrapSandbox(bwrap_path="/bin/false")  # exits before reporting a pid
    with pytest.raises(SandboxStartError, match="bwrap refused"):
        await collect(broken, request(workspace, ["true"]))
    _, ended = await collect(bwrap, request(workspace, ["/no/such/program"]))
    assert ended.reason is ExitReason.COMPLETED and ended.returncode != 0
    assert "no/such/program" in ended.stderr_tail


@pytest.mark.bwrap
async def test_large_lines_state_dir_and_read_only_binds(
    bwrap: BwrapSandbox, workspace: Path, tmp_path: Path
) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "marker.txt").write_text("runtime")
    runtime.chmod(0o700)  # as a runtime venv built in a private temp dir is
    state = tmp_path / "state"
    code = f"""
import os, sys
line = sys.stdin.readline().strip()
open("/state/seen.txt", "w").write(line)
print(open({str(runtime / "marker.txt")!r}).read())
print("z" * (5 * 1024 * 1024))
print(os.environ["RUN_SPEC_VAR"])
"""
    req = request(
        workspace,
        py(code),
        state_dir=state,
        read_only_binds=[runtime],
        env={"RUN_SPEC_VAR": "yes"},
    )
    lines, ended = await collect(bwrap, req, first_line='{"spec": 1}')
    assert ended.returncode == 0, ended
    assert lines[0] == "runtime" and len(lines[1]) == 5 * 1024 * 1024 and lines[2] == "yes"
    assert (state / "seen.txt").read_text() == '{"spec": 1}'
    assert bwrap.state_path_inside(req) == "/state" and bwrap.workspace_path_inside(req) == (
        "/workspace"
    )


async def test_send_line_reaches_a_running_program(local: LocalSandbox, workspace: Path) -> None:
    code = "import sys\nfor line in sys.stdin: print('echo:' + line.strip(), flush=True)"
    async with local.stream(request(workspace, py(code)), "first") as proc:
        assert isinstance(proc, SandboxProcess)
        it = aiter(proc)
        assert await anext(it) == "echo:first"
        await proc.send_line("second")
        assert await anext(it) == "echo:second"
        ended = await proc.stop()
    assert ended.reason is ExitReason.STOPPED
    assert local.workspace_path_inside(request(workspace, ["x"])) == str(workspace)


@pytest.mark.bwrap
async def test_concurrent_sandboxes_and_a_slow_consumer(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    code = "import sys\nfor i in range(5000): print(i)\nprint(sys.stdin.readline().strip())"

    async def one(n: int) -> tuple[list[str], ExitReason]:
        async with bwrap.stream(request(workspace, py(code)), f"run-{n}") as proc:
            await asyncio.sleep(0.3)  # the program finishes while its queue is full
            lines = [line async for line in proc]
        assert proc.exit is not None
        return lines, proc.exit.reason

    results = await asyncio.gather(*(one(n) for n in range(6)))
    for n, (lines, reason) in enumerate(results):
        assert reason is ExitReason.COMPLETED
        assert lines[:2] == ["0", "1"] and lines[-1] == f"run-{n}" and len(lines) == 5001


def test_env_names_are_validated(tmp_path: Path) -> None:
    with pytest.raises(pydantic.ValidationError, match="invalid name"):
        request(tmp_path, ["true"], env={"BAD=NAME": "x"})


@pytest.mark.bwrap
async def test_cpu_time_limit_is_reported_as_a_timeout(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    limits = SandboxLimits(cpu_seconds=1, wall_timeout_s=20)
    _, ended = await collect(bwrap, request(workspace, py("while True: pass"), limits=limits))
    assert ended.reason is ExitReason.TIMEOUT and "RLIMIT_CPU" in ended.message, ended


@pytest.mark.bwrap
async def test_without_cgroups_rlimits_still_cap_memory(workspace: Path) -> None:
    """A host without usable cgroups: the row says weaker, and RLIMIT_AS still bites."""
    sandbox = BwrapSandbox()
    sandbox._cgroups = CgroupSupport(CgroupMode.NONE, detail="forced off for this test")
    resources = next(r for r in sandbox.boundary().rows if r.boundary == "resources")
    assert resources.status is BoundaryStatus.WEAKER and resources.warning
    limits = SandboxLimits(memory_bytes=256 * 1024**2, wall_timeout_s=20)
    code = "hog = []\nwhile True: hog.append(b'x' * (16 << 20))"
    _, ended = await collect(sandbox, request(workspace, py(code), limits=limits))
    assert ended.returncode == 1 and "MemoryError" in ended.stderr_tail, ended
    assert ended.peak_processes is None


@pytest.mark.bwrap
async def test_sweep_removes_only_empty_stale_run_cgroups(
    bwrap: BwrapSandbox, workspace: Path
) -> None:
    from synthorg.sandbox.cgroups import sweep_stale

    support = bwrap.cgroups
    if support.mode is CgroupMode.NONE:
        pytest.skip("no cgroups here")
    stale = RunCgroup(support, "stale-test", SandboxLimits())  # as if its host was SIGKILLed
    stale_label, live_label = cgroup_label("stale-test"), cgroup_label("live-test")
    code = "import sys; print('up', flush=True); sys.stdin.readline(); sys.stdin.readline()"
    async with bwrap.stream(request(workspace, py(code), conversation_id="live-test"), "{}") as p:
        assert await anext(aiter(p)) == "up"
        live = [d for par in support.parents.values() for d in par.glob(f"{live_label}-*")]
        assert live
        # Other sessions on this host may be creating cgroups right now: only touch ours.
        assert sweep_stale(support, older_than_s=0, prefix=stale_label) >= 1
        assert sweep_stale(support, older_than_s=0, prefix=live_label) == 0
        assert all(d.exists() for d in live)  # busy: rmdir refused
        assert not any(d.exists() for d in stale.dirs.values())
