"""The attacker's probe run inside a sandbox, and a scripted model that runs it in a real run.

The probe (stdlib only) tries what issue 12 found: write host kernel knobs, escape the uid,
make namespaces / mount / trace / load BPF, fill the disk, leave a core dump, and read the
host's paths and ids from /proc. It reports each result in one JSON object (printed, and
written to ``/workspace/.redteam.json`` when given ``--save``); the tests judge it host-side.
"""

from __future__ import annotations

from collections.abc import Sequence

from synthorg.engine.native.scripts import Tools, steps_of
from synthorg.gateway.scripted import ScriptedTurn
from synthorg.gateway.wire import ChatMessage

PROBE = r"""
import ctypes, errno, json, os, platform, resource, signal, subprocess, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {"uid": os.getuid(), "gid": os.getgid(), "euid": os.geteuid()}

def err(exc):
    return errno.errorcode.get(exc.errno, str(exc.errno)) if isinstance(exc, OSError) else repr(exc)

def c_call(fn, *args):
    rc = fn(*args)
    return "ok" if rc != -1 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

def read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError as exc:
        return "ERR:" + err(exc)

# 1. host kernel knobs: write back the value just read (a refusal shows whatever the value)
knobs = {}
for knob in ("kernel/printk_ratelimit", "kernel/core_pattern"):
    path = "/proc/sys/" + knob
    try:
        value = open(path).read()
        with open(path, "w") as fh:
            fh.write(value)
        knobs[knob] = "WRITTEN"
    except OSError as exc:
        knobs[knob] = err(exc)
out["knobs"] = knobs

# 2. seccomp: syscalls that must fail with EPERM; getpid must still work
nrs = {"x86_64": {"bpf": 321, "keyctl": 250, "add_key": 248, "perf_event_open": 298,
                  "open_by_handle_at": 304, "kexec_load": 246, "getpid": 39},
       "aarch64": {"bpf": 280, "keyctl": 219, "add_key": 217, "perf_event_open": 241,
                   "open_by_handle_at": 265, "kexec_load": 104, "getpid": 172}}[platform.machine()]
denied = {name: c_call(libc.syscall, nr, 0, 0, 0, 0, 0)
          for name, nr in nrs.items() if name != "getpid"}
def in_child(fn, *args):
    # where it works it changes the caller (namespaces, tracer): try it in a throwaway child
    pid = os.fork()
    if pid == 0:
        result = fn(*args)
        os._exit(0 if result == "ok" else getattr(errno, result, 99))
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return "ok" if code == 0 else errno.errorcode.get(code, str(code))
def unshare(flag):
    try:
        os.unshare(flag)
        return "ok"
    except OSError as exc:
        return err(exc)
denied["mount"] = in_child(c_call, libc.mount, b"none", b"/tmp", b"tmpfs", 0, None)
denied["umount2"] = in_child(c_call, libc.umount2, b"/tmp", 0)
denied["ptrace"] = in_child(c_call, libc.ptrace, 0, 0, None, None)  # PTRACE_TRACEME
for flag in ("CLONE_NEWUSER", "CLONE_NEWNS", "CLONE_NEWNET", "CLONE_NEWPID"):
    denied["unshare " + flag] = in_child(unshare, getattr(os, flag))
out["denied"] = denied
out["getpid"] = libc.syscall(nrs["getpid"]) == os.getpid()
wanted = ("Seccomp:", "NoNewPrivs:", "CapEff:", "CapBnd:")
out["seccomp_status"] = [s for s in read("/proc/self/status").splitlines() if s.startswith(wanted)]

# 3. disk: fill the worktree and /tmp until refused
def fill(path, cap):
    written = 0
    chunk = b"\0" * (1 << 20)
    try:
        with open(path, "wb") as fh:
            while written < cap:
                fh.write(chunk)
                fh.flush()
                written += len(chunk)
            os.fsync(fh.fileno())
        return {"written": written, "error": None}
    except OSError as exc:
        return {"written": written, "error": err(exc)}
FILL = int(os.environ.get("REDTEAM_FILL_BYTES", str(64 << 20)))
out["fill_workspace"] = fill("/workspace/redteam-fill.bin", FILL)
out["fill_tmp"] = fill("/tmp/redteam-fill.bin", FILL)
os.unlink("/tmp/redteam-fill.bin")
if "--keep-fill" not in sys.argv:
    os.unlink("/workspace/redteam-fill.bin")
out["after_fill"] = "the program went on"

# 4. core dumps: raise the soft limit to the hard one (ulimit -c unlimited), then crash
soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
out["core_limit"] = [soft, hard]
crash = ("import os, resource, signal; h = resource.getrlimit(resource.RLIMIT_CORE)[1]; "
         "resource.setrlimit(resource.RLIMIT_CORE, (h, h)); os.kill(os.getpid(), signal.SIGSEGV)")
done = subprocess.run([sys.executable, "-c", crash], cwd="/workspace")
out["crash_status"] = done.returncode
out["core_files"] = sorted(n for n in os.listdir("/workspace") if n.startswith("core"))

# 5. what the host leaks through /proc
out["cmdline_1"] = read("/proc/1/cmdline").replace("\0", " ")
pids = [p for p in os.listdir("/proc") if p.isdigit()]
out["cmdlines"] = [read(f"/proc/{p}/cmdline").replace("\0", " ") for p in pids]
out["environ_1"] = read("/proc/1/environ")
out["mountinfo"] = read("/proc/self/mountinfo")
out["cgroup"] = read("/proc/self/cgroup")

# 6. files it creates in the worktree
with open("/workspace/redteam-owned.txt", "w") as fh:
    fh.write("made inside")
if "--save" in sys.argv:
    with open("/workspace/.redteam.json", "w") as fh:
        json.dump(out, fh)
print(json.dumps(out))
"""

_COMMAND = (
    "REDTEAM_FILL_BYTES=33554432 python3 - --save <<'REDTEAM_EOF'\n"
    + PROBE
    + "\nREDTEAM_EOF\necho redteam-probe-done"
)


def attack_script(messages: Sequence[ChatMessage], tools: Tools) -> ScriptedTurn:
    """Runs the probe once through the terminal tool, then finishes."""
    ran = [s for s in steps_of(messages) if s.name == "terminal" and s.result is not None]
    if ran:
        return ScriptedTurn.call("finish", message="probed the sandbox")
    return ScriptedTurn.call("terminal", "Probing the sandbox.", command=_COMMAND)
