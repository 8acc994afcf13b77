"""http_fetch: allow-listed GETs, each redirect hop checked, size and time capped."""

from __future__ import annotations

import pytest
from mcp_world import CONVERSATION, World, call

from synthorg.mcp import McpClientError, McpEndpoints


async def test_fetches_an_allow_listed_url(world: World, endpoints: McpEndpoints) -> None:
    url = f"{world.fetch_url}/allowed/hello"
    result = await call(endpoints, world.bearer(), "http_fetch", {"url": url})
    assert not result.is_error, result.text
    assert result.text.startswith(f"HTTP 200 text/plain from {url}; 26 bytes")
    assert result.text.endswith("hello from the allow-list\n")
    [event] = await world.audit.of(CONVERSATION)
    assert (event.tool, event.outcome, event.arguments) == ("http_fetch", "ok", {"url": url})


async def test_follows_a_redirect_that_stays_on_the_list(
    world: World, endpoints: McpEndpoints
) -> None:
    result = await call(
        endpoints, world.bearer(), "http_fetch", {"url": f"{world.fetch_url}/allowed/hop"}
    )
    assert not result.is_error and "hello from the allow-list" in result.text


@pytest.mark.parametrize(
    "path_or_url",
    [
        "/private/secret",
        "/allowed",  # the prefix is "/allowed/": its parent is not on the list
        "/allowedx/secret",
        "http://127.0.0.2/allowed/hello",
        "file:///etc/passwd",
    ],
)
async def test_urls_off_the_allow_list_are_refused(
    world: World, endpoints: McpEndpoints, path_or_url: str
) -> None:
    url = path_or_url if "://" in path_or_url else f"{world.fetch_url}{path_or_url}"
    result = await call(endpoints, world.bearer(), "http_fetch", {"url": url})
    expected = (
        "only http and https URLs can be fetched"
        if path_or_url.startswith("file:")
        else "is not on the http_fetch allow-list of project 'alpha'"
    )
    assert result.is_error and expected in result.text, result.text
    assert (await world.audit.of(CONVERSATION))[0].outcome == "refused"


async def test_a_redirect_off_the_list_is_refused(world: World, endpoints: McpEndpoints) -> None:
    result = await call(
        endpoints, world.bearer(), "http_fetch", {"url": f"{world.fetch_url}/allowed/escape"}
    )
    assert result.is_error and "which is not on the allow-list" in result.text
    assert "not for agents" not in result.text


async def test_the_size_cap_truncates(world: World, endpoints: McpEndpoints) -> None:
    url = f"{world.fetch_url}/allowed/big"
    capped = await call(endpoints, world.bearer(), "http_fetch", {"url": url})
    assert not capped.is_error
    assert "65536 bytes (truncated at 65536 bytes)" in capped.text
    smaller = await call(endpoints, world.bearer(), "http_fetch", {"url": url, "max_bytes": 10})
    assert "10 bytes (truncated at 10 bytes)" in smaller.text
    assert smaller.text.endswith("\n\n" + "x" * 10)
    # A caller cannot raise the project's cap.
    larger = await call(endpoints, world.bearer(), "http_fetch", {"url": url, "max_bytes": 10**9})
    assert "(truncated at 65536 bytes)" in larger.text


async def test_the_time_cap_ends_a_slow_fetch(world: World, endpoints: McpEndpoints) -> None:
    # The page answers after 3 s: without the cap the fetch would succeed with "late".
    result = await call(
        endpoints, world.bearer(), "http_fetch", {"url": f"{world.fetch_url}/allowed/slow"}
    )
    assert result.is_error and "took longer than 1s" in result.text
    assert (await world.audit.of(CONVERSATION))[0].outcome == "error"


async def test_each_project_has_its_own_list(world: World, endpoints: McpEndpoints) -> None:
    beta = world.bearer(project="beta", conversation="conv-beta-1")
    theirs = await call(endpoints, beta, "http_fetch", {"url": f"{world.fetch_url}/private/secret"})
    assert not theirs.is_error and "not for agents" in theirs.text
    ours = await call(endpoints, beta, "http_fetch", {"url": f"{world.fetch_url}/allowed/hello"})
    assert ours.is_error and "allow-list of project 'beta'" in ours.text
    named = await call(
        endpoints,
        beta,
        "http_fetch",
        {"url": f"{world.fetch_url}/allowed/hello", "project_id": "alpha"},
    )
    assert named.is_error and "cannot act on project 'alpha'" in named.text


async def test_expired_bearer_cannot_fetch(world: World, endpoints: McpEndpoints) -> None:
    token = world.bearer(ttl_s=1)
    world.clock.now += 1
    with pytest.raises(McpClientError, match="bearer expired"):
        await call(endpoints, token, "http_fetch", {"url": f"{world.fetch_url}/allowed/hello"})
    assert await world.audit.all() == []
