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

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_VIEW_CAP = 200_000
_SNIPPET = 4
_AFTER_EXIT_S = 0.05


class ToolError(Exception):
    """A request the toolbox refuses; the message goes back to the model as is."""


class Editor:
    """File edits confined to one workspace, with per-file undo history in memory."""

    def __init__(self, root: str) -> None:
        self.root = Path(os.path.realpath(root))
        self.history: dict[Path, list[str | None]] = {}

    def resolve(self, raw: str) -> Path:
        path = Path(raw)
        if not path.is_absolute():
            path = self.root / path
        real = Path(os.path.realpath(path))
        if real != self.root and self.root not in real.parents:
            raise ToolError(f"{raw} is outside the workspace {self.root}; refusing")
        return real

    def _read(self, path: Path) -> str:
        if not path.is_file():
            raise ToolError(f"{path} is not a file")
        return path.read_text(encoding="utf-8", errors="replace")

    def _write(self, path: Path, text: str, before: str | None) -> None:
        self.history.setdefault(path, []).append(before)
        path.write_text(text, encoding="utf-8")

    def view(self, path: str, view_range: list[int] | None = None) -> str:
        target = self.resolve(path)
        if target.is_dir():
            return self._listing(target)
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

    def _listing(self, path: Path) -> str:
        entries = []
        for sub in sorted(path.rglob("*")):
            rel = sub.relative_to(path)
            if len(rel.parts) > 2 or any(p.startswith(".") for p in rel.parts):
                continue
            entries.append(f"{rel}/" if sub.is_dir() else str(rel))
        return "\n".join(entries) or "(empty directory)"

    def create(self, path: str, file_text: str) -> str:
        target = self.resolve(path)
        if target.is_dir():
            raise ToolError(f"{path} is a directory")
        before = self._read(target) if target.exists() else None
        target.parent.mkdir(parents=True, exist_ok=True)
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
            target.unlink(missing_ok=True)
            return f"undid the creation of {path}"
        target.write_text(before, encoding="utf-8")
        return f"undid the last edit of {path}"

    @staticmethod
    def _snippet(text: str, first: int, count: int) -> str:
        lines = _split(text)[0]
        lo, hi = max(1, first - _SNIPPET), min(len(lines), first + count - 1 + _SNIPPET)
        return "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(lo, hi + 1))


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


def run_command(root: Path, command: str, timeout_s: float, max_output: int) -> dict[str, Any]:
    """bash -c in root, own process group; the whole group dies on timeout."""
    shell = shutil.which("bash") or "/bin/sh"
    started = time.monotonic()
    proc = subprocess.Popen(
        [shell, "-c", command],
        cwd=root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    fd, cap, timed_out = proc.stdout.fileno(), _Capture(max_output), False
    deadline, exited_at = started + timeout_s, None
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if proc.poll() is not None:
                exited_at = exited_at or now
                if now - exited_at > _AFTER_EXIT_S:
                    break  # a background job holds the pipe: stop reading, leave it be
            wait = min(deadline - now, _AFTER_EXIT_S)
            if select.select([fd], [], [], wait)[0]:
                data = os.read(fd, 65536)
                if not data:
                    try:
                        proc.wait(max(deadline - time.monotonic(), 0))
                    except subprocess.TimeoutExpired:
                        timed_out = True
                    break
                cap.add(data)
    finally:
        if timed_out:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    return {
        "exit_code": None if timed_out else proc.returncode,
        "output": cap.text(),
        "truncated": cap.total > max_output,
        "timed_out": timed_out,
        "duration_s": round(time.monotonic() - started, 4),
    }


class Toolbox:
    """Dispatches requests; each runs in its own thread, replies are written whole."""

    def __init__(self, root: str, out: Any) -> None:
        self.editor = Editor(root)
        self._out = out
        self._out_lock = threading.Lock()
        self._edit_lock = threading.Lock()

    def reply(self, message: dict[str, Any]) -> None:
        line = json.dumps(message) + "\n"
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


def main() -> int:
    config = json.loads(sys.stdin.readline() or "{}")
    toolbox = Toolbox(str(config.get("workspace", os.getcwd())), sys.stdout)
    toolbox.reply({"id": None, "ok": True, "output": "ready"})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            toolbox.reply({"id": None, "ok": False, "error": f"bad request line: {exc}"})
            continue
        threading.Thread(target=toolbox.serve, args=(request,), daemon=True).start()
    return 0


if __name__ == "__main__":
    sys.exit(main())
