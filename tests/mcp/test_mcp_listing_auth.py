"""Tool listing over streamable HTTP (TCP, unix socket, legacy handshake) and bearer checks."""

from __future__ import annotations

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_world import World, call

from synthorg.mcp import McpClientError, McpEndpoints, McpToolClient

TOOLS = {
    "git_push",
    "open_pull_request",
    "pull_request_reviews",
    "ci_status",
    "comment_on_pull_request",
    "http_fetch",
}


async def test_lists_the_three_tools_with_schemas_over_tcp(
    world: World, endpoints: McpEndpoints
) -> None:
    assert endpoints.url is not None
    specs = await McpToolClient(endpoints.url, world.bearer()).list_tools()
    assert {s.name for s in specs} == TOOLS
    by_name = {s.name: s for s in specs}
    assert by_name["http_fetch"].input_schema["required"] == ["url"]
    assert by_name["open_pull_request"].input_schema["required"] == ["title"]
    assert by_name["git_push"].input_schema["additionalProperties"] is False
    assert all(s.description for s in specs)


async def test_the_unix_socket_serves_the_same_endpoint(
    world: World, endpoints: McpEndpoints
) -> None:
    assert endpoints.uds is not None and endpoints.uds.is_socket()
    # The sandbox forwards this socket to 127.0.0.1:<its port>: any Host must be accepted.
    client = McpToolClient("http://127.0.0.1:7777/mcp", world.bearer(), uds=endpoints.uds)
    async with client:
        assert {s.name for s in await client.list_tools()} == TOOLS
        result = await client.call_tool("http_fetch", {"url": f"{world.fetch_url}/allowed/hello"})
    assert not result.is_error, result.text
    assert "hello from the allow-list" in result.text


async def test_a_legacy_handshake_client_works_too(world: World, endpoints: McpEndpoints) -> None:
    # OpenHands' MCP client speaks the initialize handshake, not the 2026 envelope.
    assert endpoints.url is not None
    headers = {"Authorization": f"Bearer {world.bearer()}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(endpoints.url, http_client=http), mode="legacy") as client,
    ):
        listed = await client.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        result = await client.call_tool("git_push", {"branch": "main"})
    assert result.is_error
    assert "protected" in result.content[0].text  # type: ignore[union-attr]


async def test_missing_bearer_is_refused_with_a_clear_error(endpoints: McpEndpoints) -> None:
    assert endpoints.url is not None
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            endpoints.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        )
    assert response.status_code == 401
    assert "missing 'Authorization: Bearer" in response.json()["error"]["message"]
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_tampered_or_foreign_key_bearer_is_refused(
    world: World, endpoints: McpEndpoints
) -> None:
    assert endpoints.url is not None
    token = world.bearer()
    head, payload, sig = token.split(".")
    tampered = f"{head}.{payload}.{sig[:-4]}AAAA"
    with pytest.raises(McpClientError, match="signature invalid"):
        await McpToolClient(endpoints.url, tampered).list_tools()


async def test_expired_bearer_is_refused_and_nothing_runs(
    world: World, endpoints: McpEndpoints
) -> None:
    assert endpoints.url is not None
    token = world.bearer(ttl_s=60)
    world.clock.now += 61
    with pytest.raises(McpClientError, match="bearer expired"):
        await McpToolClient(endpoints.url, token).list_tools()
    with pytest.raises(McpClientError, match="bearer expired"):
        await call(endpoints, token, "git_push", {})
    assert world.git_state.authorized == 0 and await world.audit.all() == []


async def test_bearer_renewed_mid_session_is_picked_up(
    world: World, endpoints: McpEndpoints
) -> None:
    assert endpoints.url is not None
    current = [world.bearer(ttl_s=60)]
    async with McpToolClient(endpoints.url, lambda: current[0]) as client:
        await client.list_tools()
        world.clock.now += 61
        with pytest.raises(McpClientError, match="expired"):
            await client.list_tools()
        current[0] = world.bearer(ttl_s=60)
        assert len(await client.list_tools()) == len(TOOLS)


async def test_unknown_tool_and_bad_arguments_are_refused_and_audited(
    world: World, endpoints: McpEndpoints
) -> None:
    bearer = world.bearer()
    # A JSON-RPC error (-32602, see test_mcp_protocol.py), which the client raises.
    with pytest.raises(McpClientError, match="unknown tool 'rm_rf'"):
        await call(endpoints, bearer, "rm_rf", {})
    bad = await call(endpoints, bearer, "http_fetch", {"url": 42, "verb": "DELETE"})
    assert bad.is_error and "invalid arguments for http_fetch" in bad.text
    assert "url" in bad.text and "verb" in bad.text
    outcomes = [(e.tool, e.outcome) for e in await world.audit.of("conv-alpha-1")]
    assert outcomes == [("rm_rf", "refused"), ("http_fetch", "refused")]


async def test_a_project_without_tool_config_is_refused(
    world: World, endpoints: McpEndpoints
) -> None:
    result = await call(
        endpoints,
        world.bearer(project="gamma", conversation="conv-g"),
        "http_fetch",
        {"url": f"{world.fetch_url}/allowed/hello"},
    )
    assert result.is_error
    assert "project 'gamma' has no credentialed tools configured" in result.text
    [event] = await world.audit.of("conv-g")
    assert event.outcome == "refused"
