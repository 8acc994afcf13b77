"""A scripted OpenAI-compatible chat-completions server on loopback (the model fake boundary).

Stand-in until ``synthorg.gateway`` ships its scripted provider: each request pops the next
scripted reply; an exhausted script answers HTTP 500 so a test fails loudly.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROMPT_TOKENS = 100
COMPLETION_TOKENS = 10


@dataclass
class Reply:
    """One scripted model turn: text, tool calls, or both."""

    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def call(name: str, **arguments: Any) -> Reply:
    """A reply that calls one tool."""
    return Reply(tool_calls=[(name, arguments)])


def finish(message: str) -> Reply:
    """A reply that calls the SDK's finish tool."""
    return call("finish", message=message)


class ScriptedServer:
    """Serves ``/v1/chat/completions`` from a script; records every request body."""

    def __init__(self, script: list[Reply], token: str = "test-bearer") -> None:
        self.script = list(script)
        self.token = token
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._calls = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def extend(self, replies: list[Reply]) -> None:
        with self._lock:
            self.script.extend(replies)

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            if not self.script:
                return 500, {"error": {"message": "script exhausted", "type": "server_error"}}
            reply = self.script.pop(0)
            self._calls += 1
            n = self._calls
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{n}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(reply.tool_calls)
            ]
        return 200, {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1_700_000_000 + n,
            "model": body.get("model", "scripted"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": PROMPT_TOKENS,
                "completion_tokens": COMPLETION_TOKENS,
                "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
            },
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.headers.get("Authorization") != f"Bearer {server.token}":
                    status, payload = 401, {"error": {"message": "bad bearer"}}
                elif not self.path.endswith("/chat/completions"):
                    status, payload = 404, {"error": {"message": f"no route {self.path}"}}
                else:
                    status, payload = server._next(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
