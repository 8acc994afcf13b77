"""Protocol details of the MCP endpoint, on the wire: JSON-RPC errors and request-target forms."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import httpx
import pytest
from mcp_world import CONVERSATION, World

from synthorg.mcp import McpEndpoints

INVALID_PARAMS = -32602
_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _rpc(method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


async def test_an_unknown_tool_is_a_json_rpc_invalid_params_error(
    world: World, endpoints: McpEndpoints
) -> None:
    # MCP spec (tools, error handling): an unknown tool is a protocol error, -32602.
    assert endpoints.url is not None
    headers = {**_HEADERS, "authorization": f"Bearer {world.bearer()}"}
    async with httpx.AsyncClient(trust_env=False) as http:
        reply = await http.post(
            endpoints.url,
            headers=headers,
            json=_rpc("tools/call", {"name": "rm_rf", "arguments": {}}),
        )
    body = reply.json()
    assert "result" not in body, body
    assert body["id"] == 7 and body["error"]["code"] == INVALID_PARAMS
    assert "unknown tool 'rm_rf'" in body["error"]["message"]
    assert "git_push" in body["error"]["message"]  # it names what is available
    [event] = await world.audit.of(CONVERSATION)
    assert (event.tool, event.outcome) == ("rm_rf", "refused")


async def _raw_request(host: str, port: int, head: str, body: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        async with asyncio.timeout(30):  # a deadline for a stuck server, not a wait
            answer = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize("target_form", ["absolute", "origin"])
async def test_an_absolute_form_request_line_is_served(
    world: World, endpoints: McpEndpoints, target_form: str
) -> None:
    # RFC 9112 §3.2.2: a server must accept the absolute form (as sent to a proxy).
    assert endpoints.url is not None
    parts = urlsplit(endpoints.url)
    assert parts.hostname is not None and parts.port is not None
    target = endpoints.url if target_form == "absolute" else parts.path
    body = json.dumps(_rpc("tools/list", {})).encode()
    head = (
        f"POST {target} HTTP/1.1\r\n"
        f"Host: {parts.netloc}\r\n"
        f"Authorization: Bearer {world.bearer()}\r\n"
        f"Accept: {_HEADERS['accept']}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    status, payload = await _raw_request(parts.hostname, parts.port, head, body)
    assert status == 200, payload
    tools = {t["name"] for t in json.loads(payload)["result"]["tools"]}
    assert "git_push" in tools


async def test_an_absolute_form_request_line_still_needs_a_bearer(
    endpoints: McpEndpoints,
) -> None:
    assert endpoints.url is not None
    parts = urlsplit(endpoints.url)
    assert parts.hostname is not None and parts.port is not None
    body = json.dumps(_rpc("tools/list", {})).encode()
    head = (
        f"POST {endpoints.url} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    status, _ = await _raw_request(parts.hostname, parts.port, head, body)
    assert status == 401
