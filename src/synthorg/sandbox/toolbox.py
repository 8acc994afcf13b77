"""STDLIB-ONLY in-sandbox toolbox for the native loops: shell commands and file edits.

Protocol (JSON lines): the first stdin line is the config ``{"workspace": "/workspace"}``;
the toolbox answers ``{"id": null, "ok": true, "output": "ready"}``. Every later line is a
request with an ``id`` echoed in its reply:

- ``{"op": "run", "command", "timeout_s", "max_output"}`` -> ``exit_code`` (None on timeout),
  ``output`` (stdout+stderr, head and tail kept when over max_output bytes), ``truncated``,
  ``timed_out``. The command runs as ``bash -c`` in the workspace in its own process group;
  a timeout kills the whole group.
- ``{"op": "view", "path", "view_range"?}``, ``{"op": "create", "path", "file_text"}``,
  ``{"op": "str_replace", "path", "old_str", "new_str"}``,
  ``{"op": "insert", "path", "insert_line", "new_str"}``, ``{"op": "undo_edit", "path"}``
  -> ``ok``, ``output``, ``error``. Paths resolve (symlinks followed) inside the workspace.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's C half: typeshed has no stub
import _thread
import os
import select
import sys
import time

TYPE_CHECKING = False  # typing itself is not imported: see below
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# One toolbox runs per governed run (32 at once in the stress benchmark), so what it imports
# is paid per run, in CPU and in memory: ``subprocess``, ``threading``, ``signal``,
# ``pathlib``, ``shutil``, ``typing`` and ``json``'s package (which loads ``re``) took it from
# ~3 to ~6 MiB of private memory and from ~15 to ~55 ms of CPU per start. It uses the
# interpreter's built-in modules instead: ``_thread``, ``_signal``, ``os.posix_spawn`` and
# ``_json`` (the C halves of ``threading``, ``signal`` and ``json``; ``json`` where ``_json``
# is missing).
_VIEW_CAP = 200_000
_SNIPPET = 4
_AFTER_EXIT_S = 0.05
#: Python ignores these at start; a command gets them back at their defaults, as subprocess's
#: restore_signals did (the file-size cap must kill a writer with SIGXFSZ, not just fail it).
_RESTORED_SIGNALS = (_signal.SIGPIPE, _signal.SIGXFSZ)
_SEP = os.sep


class ToolError(Exception):
    """A request the toolbox refuses; the message goes back to the model as is."""


class Editor:
    """File edits confined to one workspace, with per-file undo history in memory."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self._inside = self.root.rstrip(_SEP) + _SEP
        self.history: dict[str, list[str | None]] = {}

    def resolve(self, raw: str) -> str:
        """The real path ``raw`` names (relative to the workspace; symlinks followed), which
        must be the workspace or inside it."""
        real = os.path.realpath(os.path.join(self.root, raw))  # an absolute raw stays itself
        if real != self.root and not real.startswith(self._inside):
            raise ToolError(f"{raw} is outside the workspace {self.root}; refusing")
        return real

    def _read(self, path: str) -> str:
        if not os.path.isfile(path):
            raise ToolError(f"{path} is not a file")
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def _write(self, path: str, text: str, before: str | None) -> None:
        self.history.setdefault(path, []).append(before)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)

    def view(self, path: str, view_range: list[int] | None = None) -> str:
        target = self.resolve(path)
        if os.path.isdir(target):
            return _listing(target)
        lines = _split(self._read(target))[0]
        start, end = 1, len(lines)
        if view_range:
            start, end = view_range[0], view_range[1]
            end = len(lines) if end == -1 else end
            if not 1 <= start <= end <= len(lines):
                raise ToolError(f"view_range {view_range} outside 1..{len(lines)} of {path}")
        out = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(start, end + 1))
        if len(out) > _VIEW_CAP:
            out = out[:_VIEW_CAP] + "\n[... truncated: use view_range ...]"
        return out

    def create(self, path: str, file_text: str) -> str:
        target = self.resolve(path)
        if os.path.isdir(target):
            raise ToolError(f"{path} is a directory")
        before = self._read(target) if os.path.exists(target) else None
        os.makedirs(os.path.dirname(target), exist_ok=True)
        self._write(target, file_text, before)
        return f"{'overwrote' if before is not None else 'created'} {path}"

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        target = self.resolve(path)
        text = self._read(target)
        count = text.count(old_str) if old_str else 0
        if count != 1:
            if count == 0:
                raise ToolError(f"old_str not found in {path}; nothing replaced")
            starts, pos = [], text.find(old_str)
            while pos != -1:
                starts.append(str(text.count("\n", 0, pos) + 1))
                pos = text.find(old_str, pos + 1)
            raise ToolError(
                f"old_str occurs {count} times in {path} (lines {', '.join(starts)}); "
                "include more context so it matches exactly once"
            )
        at = text.count("\n", 0, text.find(old_str)) + 1
        new_text = text.replace(old_str, new_str, 1)
        self._write(target, new_text, text)
        return f"edited {path}\n" + self._snippet(new_text, at, new_str.count("\n") + 1)

    def insert(self, path: str, insert_line: int, new_str: str) -> str:
        target = self.resolve(path)
        text = self._read(target)
        lines, trailing = _split(text)
        if not 0 <= insert_line <= len(lines):
            raise ToolError(f"insert_line {insert_line} outside 0..{len(lines)} of {path}")
        new_lines = new_str.removesuffix("\n").split("\n")
        new_text = "\n".join(lines[:insert_line] + new_lines + lines[insert_line:]) + trailing
        self._write(target, new_text, text)
        return f"inserted into {path}\n" + self._snippet(new_text, insert_line + 1, len(new_lines))

    def undo_edit(self, path: str) -> str:
        target = self.resolve(path)
        stack = self.history.get(target)
        if not stack:
            raise ToolError(f"no edit to undo for {path}")
        before = stack.pop()
        if before is None:
            try:  # noqa: SIM105  (contextlib is one more import per toolbox)
                os.unlink(target)
            except FileNotFoundError:
                pass
            return f"undid the creation of {path}"
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(before)
        return f"undid the last edit of {path}"

    @staticmethod
    def _snippet(text: str, first: int, count: int) -> str:
        lines = _split(text)[0]
        lo, hi = max(1, first - _SNIPPET), min(len(lines), first + count - 1 + _SNIPPET)
        return "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(lo, hi + 1))


def _listing(path: str) -> str:
    """Two levels of a directory, hidden entries left out, directories marked with ``/``;
    directories reached through a symlink are not entered (as ``Path.rglob`` did)."""
    entries: list[tuple[list[str], str]] = []
    for name, full, real_dir in _scan(path):
        if name.startswith("."):
            continue
        entries.append(([name], f"{name}/" if os.path.isdir(full) else name))
        if not real_dir:
            continue
        for sub, sub_full, _ in _scan(full):
            if not sub.startswith("."):
                shown = f"{name}/{sub}"
                entries.append(([name, sub], f"{shown}/" if os.path.isdir(sub_full) else shown))
    entries.sort(key=lambda entry: entry[0])  # by path components, as paths sort
    return "\n".join(shown for _, shown in entries) or "(empty directory)"


def _scan(path: str) -> list[tuple[str, str, bool]]:
    """(name, path, is a directory and not a symlink) of each entry; [] when unreadable."""
    try:
        with os.scandir(path) as it:
            return [(e.name, e.path, e.is_dir(follow_symlinks=False)) for e in it]
    except OSError:
        return []


def _split(text: str) -> tuple[list[str], str]:
    """Lines of text without the phantom line after a final newline, and that newline."""
    if text.endswith("\n"):
        return text[:-1].split("\n"), "\n"
    return (text.split("\n") if text else []), ""


class _Capture:
    """Keeps the first and last bytes of a stream within a cap."""

    def __init__(self, cap: int) -> None:
        self.cap, self.total = cap, 0
        self.head, self.tail = bytearray(), bytearray()

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap // 2 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        keep = self.cap - len(self.head)
        if len(self.tail) > keep:
            del self.tail[: len(self.tail) - keep]

    def text(self) -> str:
        if self.total <= self.cap:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace")
        cut = self.total - len(self.head) - len(self.tail)
        marker = f"\n[... {cut} bytes truncated ...]\n".encode()
        return (bytes(self.head) + marker + bytes(self.tail)).decode("utf-8", "replace")


def _which_shell() -> str:
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", "bash")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return "/bin/sh"


# Changes directory, then becomes the program: for a caller whose working directory is not
# the command's (the toolbox itself runs in its workspace, so it never needs this). Python
# ignores SIGPIPE and SIGXFSZ again at its start: back to their defaults before the exec.
_CHDIR_EXEC = (
    "import os, sys, _signal as s; os.chdir(sys.argv[1]); "
    "[s.signal(n, s.SIG_DFL) for n in (s.SIGPIPE, s.SIGXFSZ)]; "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def _spawn(root: str, argv: list[str], out: int) -> int:
    """Start argv in root with stdin from /dev/null and stdout+stderr into ``out``, as the
    leader of a new session (so of a process group a timeout kills whole); its pid."""
    if os.path.realpath(os.getcwd()) != os.path.realpath(root):
        argv = [sys.executable, "-I", "-S", "-c", _CHDIR_EXEC, str(root), *argv]
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, out, 1),
        (os.POSIX_SPAWN_DUP2, out, 2),
    ]
    # Pipe ends are close-on-exec (PEP 446): a command never holds another's pipe open.
    return os.posix_spawn(
        argv[0],
        argv,
        os.environ,
        file_actions=actions,
        setsid=True,
        setsigdef=_RESTORED_SIGNALS,
    )


def run_command(root: str, command: str, timeout_s: float, max_output: int) -> dict[str, Any]:
    """bash -c in root, own process group; the whole group dies on timeout."""
    started = time.monotonic()
    fd, write_end = os.pipe()
    try:
        pid = _spawn(root, [_which_shell(), "-c", command], write_end)
    except BaseException:
        os.close(fd)
        raise
    finally:
        os.close(write_end)
    cap, timed_out, status = _Capture(max_output), False, None
    deadline, exited_at = started + timeout_s, None
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if status is None:
                status = _reap(pid, os.WNOHANG)
            if status is not None:
                exited_at = exited_at or now
                if now - exited_at > _AFTER_EXIT_S:
                    break  # a background job holds the pipe: stop reading, leave it be
            wait = min(deadline - now, _AFTER_EXIT_S)
            if select.select([fd], [], [], wait)[0]:
                data = os.read(fd, 65536)
                if not data:
                    break
                cap.add(data)
        while status is None and not timed_out:  # output closed: wait for the exit
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            status = _reap(pid, os.WNOHANG)
            if status is None:
                time.sleep(min(left, 0.005))
    finally:
        if timed_out:
            try:  # noqa: SIM105  (contextlib is one more import per toolbox)
                os.killpg(pid, _signal.SIGKILL)
            except ProcessLookupError:
                pass
        if status is None:
            status = _reap(pid, 0)
        os.close(fd)
    return {
        "exit_code": None if timed_out else status,
        "output": cap.text(),
        "truncated": cap.total > max_output,
        "timed_out": timed_out,
        "duration_s": round(time.monotonic() - started, 4),
    }


def _reap(pid: int, options: int) -> int | None:
    """The exit code of pid once it has ended (negative signal number when killed)."""
    done, status = os.waitpid(pid, options)
    return os.waitstatus_to_exitcode(status) if done else None


class _DecodeContext:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    def __init__(self) -> None:
        self.memo: dict[str, str] = {}

    @staticmethod
    def parse_constant(name: str) -> float:
        return float(name.replace("Infinity", "inf"))  # NaN, Infinity, -Infinity


def _codec() -> tuple[Callable[[str], Any], Callable[[Any], str]]:
    """``json.loads`` for one line and ``json.dumps`` with default settings, made from the C
    scanner and encoder json itself uses, without json's package (and ``re``)."""
    try:
        import _json
    except ImportError:  # another interpreter: the json package
        import json

        return json.loads, json.dumps
    scan = _json.make_scanner(_DecodeContext())  # type: ignore[arg-type]  # duck-typed

    def refuse(value: object) -> object:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    encode = _json.make_encoder(
        {}, refuse, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )

    def loads(text: str) -> Any:
        text = text.strip()
        try:
            value, end = scan(text, 0)
        except StopIteration as exc:
            raise ValueError(f"Expecting value: column {exc.value + 1}") from None
        if end != len(text):
            raise ValueError(f"Extra data: column {end + 1}")
        return value

    def dumps(value: Any) -> str:
        return "".join(encode(value, 0))

    return loads, dumps


loads, dumps = _codec()


class Toolbox:
    """Dispatches requests; each runs in its own thread, replies are written whole."""

    def __init__(self, root: str, out: Any) -> None:
        self.editor = Editor(root)
        self._out = out
        self._out_lock = _thread.allocate_lock()
        self._edit_lock = _thread.allocate_lock()

    def reply(self, message: dict[str, Any]) -> None:
        line = dumps(message) + "\n"
        with self._out_lock:
            self._out.write(line)
            self._out.flush()

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "run":
            result = run_command(
                self.editor.root,
                str(request["command"]),
                float(request.get("timeout_s", 60)),
                int(request.get("max_output", 100_000)),
            )
            return {"ok": True, **result}
        args = {k: v for k, v in request.items() if k not in ("id", "op")}
        methods: dict[str, Callable[..., str]] = {
            "view": self.editor.view,
            "create": self.editor.create,
            "str_replace": self.editor.str_replace,
            "insert": self.editor.insert,
            "undo_edit": self.editor.undo_edit,
        }
        method = methods.get(str(op))
        if method is None:
            raise ToolError(f"unknown op {op!r}")
        with self._edit_lock:
            return {"ok": True, "output": method(**args)}

    def serve(self, request: dict[str, Any]) -> None:
        try:
            result = self.handle(request)
        except ToolError as exc:
            result = {"ok": False, "error": str(exc)}
        except (OSError, TypeError, KeyError, ValueError) as exc:
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        self.reply({"id": request.get("id"), **result})


def _inherit_nothing() -> None:
    """Mark every descriptor above stderr close-on-exec, so commands inherit none of them
    (what subprocess's ``close_fds`` did for each command); new ones are so already."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:  # noqa: SIM105  (contextlib is one more import per toolbox)
                os.set_inheritable(fd, False)
            except OSError:
                pass  # the listing's own descriptor, closed by now


def main() -> int:
    _inherit_nothing()
    config = loads(sys.stdin.readline() or "{}")
    toolbox = Toolbox(str(config.get("workspace", os.getcwd())), sys.stdout)
    os.chdir(toolbox.editor.root)  # where every command runs: spawned without a detour
    toolbox.reply({"id": None, "ok": True, "output": "ready"})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = loads(line)
        except ValueError as exc:
            toolbox.reply({"id": None, "ok": False, "error": f"bad request line: {exc}"})
            continue
        _thread.start_new_thread(toolbox.serve, (request,))
    return 0


if __name__ == "__main__":
    sys.exit(main())
