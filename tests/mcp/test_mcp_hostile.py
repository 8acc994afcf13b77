"""Issue 13's MCP findings, attacked as the agent would: its own bearer, a real MCP client.

Each test names the finding it reproduces; each failed on the code before the fix.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import sqlite3
import tracemalloc
from contextlib import AbstractAsyncContextManager
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_servers import gzip_bomb
from mcp_world import (
    CONVERSATION,
    FORGE_TOKEN,
    GIT_TOKEN,
    OTHER_CONVERSATION,
    StoreAudit,
    World,
    call,
    make_config,
)

from synthorg.domain.binding import RunBinding
from synthorg.mcp import (
    McpClientError,
    McpEndpoints,
    McpToolClient,
    create_mcp_app,
    serve_mcp,
)
from synthorg.store.protocol import ExecutionStatus

BRANCH = f"synthorg/{CONVERSATION}"


def _serve(world: World, fetch: dict[str, object]) -> AbstractAsyncContextManager[McpEndpoints]:
    """The MCP server with project alpha's fetch policy replaced by ``fetch``."""
    data = world.config.model_dump(mode="json")
    data["projects"][0]["fetch"] = fetch
    config = make_config(data)
    return serve_mcp(
        create_mcp_app(config, world.signer, world.vault, world.audit), host="127.0.0.1"
    )


def _bearer_for(world: World, execution_id: str) -> str:
    return world.signer.mint(
        RunBinding(
            execution_id=execution_id,
            agent_id="agent-1",
            task_id="task-1",
            project_id="alpha",
            conversation_id=CONVERSATION,
            provider="scripted",
            model_id="scripted-1",
        ),
        ttl_s=600,
        ledger_id=world.audit.ledger_id,
    )


# ------------------------------------------------ finding 1: dot segments bypass the allow-list


@pytest.mark.parametrize(
    "path",
    [
        "/allowed/../private/secret",
        "/allowed/./../private/secret",
        "/allowed/%2e%2e/private/secret",
        "/allowed/%2E%2E/private/secret",
        "/allowed/.%2e/private/secret",
        "/allowed/x/../../private/secret",
        "/allowed/..%2fprivate/secret",
        "/allowed/..;/private/secret",
    ],
)
async def test_dot_segments_cannot_leave_the_allowed_prefix(
    world: World, endpoints: McpEndpoints, path: str
) -> None:
    result = await call(endpoints, world.bearer(), "http_fetch", {"url": world.fetch_url + path})
    assert result.is_error, result.text
    assert "not for agents" not in result.text
    assert not any(p.startswith("/private") for p in world.fetch_state.served)
    assert (await world.audit.of(CONVERSATION))[0].outcome == "refused"


async def test_the_request_sent_is_the_normal_form_that_was_matched(
    world: World, endpoints: McpEndpoints
) -> None:
    host = world.fetch_url.removeprefix("http://")
    url = f"HTTP://{host}/allowed/x/./y/../../%68ello"
    result = await call(endpoints, world.bearer(), "http_fetch", {"url": url})
    assert not result.is_error, result.text
    assert result.text.startswith(f"HTTP 200 text/plain from http://{host}/allowed/hello;")
    # The request line carried exactly the checked form: nothing left for the server to resolve.
    assert world.fetch_state.targets == ["/allowed/hello"]
    assert world.fetch_state.hosts == [host]


# ------------------------------------------------ finding 2: decompression bomb


@pytest.mark.slow
@pytest.mark.parametrize("bomb", ["/allowed/bomb", "/allowed/deflate-bomb"])
async def test_a_nested_compression_bomb_is_capped_while_decoding(
    world: World, endpoints: McpEndpoints, bomb: str
) -> None:
    gzip_bomb(), gzip_bomb(1)  # built before measuring (the server side's cost, not ours)
    gc.collect()
    tracemalloc.start()
    try:
        result = await call(
            endpoints, world.bearer(), "http_fetch", {"url": world.fetch_url + bomb}
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not result.is_error, result.text
    assert "65536 bytes (truncated at 65536 bytes)" in result.text
    assert result.text.endswith("\x00" * 100)
    # 512 MiB behind two encodings; the whole process (client, server, test) stayed small.
    assert peak < 48 << 20, f"peak {peak >> 20} MiB while decoding"


async def test_an_unsupported_encoding_is_an_error_not_garbage(
    world: World, endpoints: McpEndpoints
) -> None:
    result = await call(
        endpoints, world.bearer(), "http_fetch", {"url": f"{world.fetch_url}/allowed/brotli"}
    )
    assert result.is_error and "unsupported Content-Encoding 'br'" in result.text


async def test_the_event_loop_answers_while_a_bomb_is_decoded(
    world: World, endpoints: McpEndpoints
) -> None:
    gzip_bomb()  # built before (the upstream's cost, not the server's)
    bearer = world.bearer()
    bomb = asyncio.create_task(
        call(endpoints, bearer, "http_fetch", {"url": f"{world.fetch_url}/allowed/bomb"})
    )
    # Calls made while the bomb is being fetched are answered (the loop is never blocked for
    # the whole decode): each completes, and the bomb call still ends capped.
    answered = await asyncio.gather(
        *(
            call(endpoints, bearer, "http_fetch", {"url": f"{world.fetch_url}/allowed/hello"})
            for _ in range(3)
        )
    )
    assert all("hello from the allow-list" in r.text for r in answered)
    assert "truncated at 65536 bytes" in (await bomb).text


# ------------------------------------------------ finding 3: truncation before redaction


def _pieces(token: str, size: int = 8) -> set[str]:
    return {token[i : i + size] for i in range(len(token) - size + 1)}


def _leaked(text: str) -> list[str]:
    return sorted(p for t in (GIT_TOKEN, FORGE_TOKEN) for p in _pieces(t) if p in text)


async def _assert_nothing_leaked(world: World, output: str) -> None:
    """No piece of either token in the tool's output or in the run's audit log."""
    events = await world.audit.log(CONVERSATION)
    audit = "\n".join(e.model_dump_json() for e in events)
    for where, text in {"output": output, "audit": audit}.items():
        assert _leaked(text) == [], f"token piece in {where}"


async def test_a_token_halved_by_the_forge_message_cut_is_still_redacted(
    world: World, endpoints: McpEndpoints
) -> None:
    result = await call(endpoints, world.bearer(), "open_pull_request", {"title": "echo-long"})
    assert result.is_error and "HTTP 422" in result.text
    await _assert_nothing_leaked(world, result.text)


@pytest.mark.parametrize("pad", [0, 9, 18, 27])
async def test_a_token_halved_by_the_push_error_tail_is_still_redacted(
    world: World, endpoints: McpEndpoints, pad: int
) -> None:
    # The remote's pre-receive hook prints the credential back to back, then fails: wherever
    # the 2,000-character tail starts, it starts inside a copy of the token.
    hook = world.remote / "hooks" / "pre-receive"
    hook.write_text(
        f"#!/bin/sh\nprintf 'rejected: %s' '{GIT_TOKEN * 80}'\nprintf '%{pad}s\\n' ''\nexit 1\n"
    )
    hook.chmod(0o755)
    world.commit_on(BRANCH)
    result = await call(endpoints, world.bearer(), "git_push", {})
    assert result.is_error and "git push" in result.text and "[REDACTED]" in result.text
    await _assert_nothing_leaked(world, result.text)


def _page(world: World, path: str, body: bytes) -> str:
    world.fetch_state.pages[path] = (body, {})
    return f"{world.fetch_url}{path}"


async def test_a_token_across_the_fetch_cap_is_redacted_not_halved(
    world: World, endpoints: McpEndpoints
) -> None:
    url = _page(world, "/allowed/straddle", b"a" * (65536 - 11) + GIT_TOKEN.encode() + b" tail")
    result = await call(endpoints, world.bearer(), "http_fetch", {"url": url})
    assert not result.is_error and "(truncated at 65536 bytes)" in result.text
    assert _leaked(result.text) == [] and GIT_TOKEN[:11] not in result.text
    # Redacted whole, then cut: the marker (and one character of what follows) fit the cap.
    assert result.text.endswith("a[REDACTED] ")


@pytest.mark.parametrize("case", [str.lower, str.upper])
async def test_a_hex_encoded_token_is_redacted(
    world: World, endpoints: McpEndpoints, case: object
) -> None:
    hexed = case(GIT_TOKEN.encode().hex())  # type: ignore[operator]
    url = _page(world, "/allowed/hex", f"digest: {hexed} end".encode())
    result = await call(endpoints, world.bearer(), "http_fetch", {"url": url})
    assert result.text.endswith("digest: [REDACTED] end"), result.text


@pytest.mark.parametrize("user", ["x-access-token", "ab", "a", ""])
async def test_the_tail_of_a_base64_token_is_redacted_too(
    world: World, endpoints: McpEndpoints, user: str
) -> None:
    basic = base64.b64encode(f"{user}:{GIT_TOKEN}".encode()).decode()
    url = _page(world, "/allowed/basic", f"Authorization: Basic {basic} (echoed)".encode())
    result = await call(endpoints, world.bearer(), "http_fetch", {"url": url})
    # Nothing of the token's own characters is left after the marker (only the user's part,
    # and the one character sharing bits with it, before it).
    assert result.text.endswith("[REDACTED] (echoed)"), result.text
    head = result.text.rsplit("Basic ", 1)[1].split("[REDACTED]")[0]
    assert len(head) <= -(-len(f"{user}:") * 8 // 6) + 1


# ------------------------------------------------ finding 4: actions without an audit record


async def test_a_bearer_for_an_unknown_conversation_does_nothing(
    world: World, endpoints: McpEndpoints
) -> None:
    ghost = "conv-ghost-9"
    world.commit_on(f"synthorg/{ghost}")
    bearer = world.bearer(conversation=ghost)
    for tool, arguments in [
        ("git_push", {}),
        ("open_pull_request", {"title": "x"}),
        ("http_fetch", {"url": f"{world.fetch_url}/allowed/hello"}),
    ]:
        result = await call(endpoints, bearer, tool, arguments)
        assert result.is_error and f"conversation {ghost!r} is not known" in result.text
    assert world.git_state.authorized == 0
    assert world.forge_state.auth_headers == [] and world.fetch_state.targets == []


class _AuditRefusingStore(StoreAudit):
    """The real store with a trigger that makes every audit insert fail (a full disk, a
    revoked grant): reads work, the audit cannot be written."""

    @classmethod
    def over(cls, audit: StoreAudit, path: Path) -> _AuditRefusingStore:
        with sqlite3.connect(path) as db:
            db.execute(
                "CREATE TRIGGER no_audit BEFORE INSERT ON events WHEN NEW.kind = 'tool_audit' "
                "BEGIN SELECT RAISE(ABORT, 'audit log unavailable'); END"
            )
        return cls(audit.store)


async def test_nothing_is_done_when_the_intent_cannot_be_audited(world: World) -> None:
    store = _AuditRefusingStore.over(world.audit, world.tmp / "store.db")
    world.commit_on(BRANCH)
    app = create_mcp_app(world.config, world.signer, world.vault, store)
    async with serve_mcp(app, host="127.0.0.1") as ends:
        bearer = world.bearer()
        results = [
            await call(ends, bearer, tool, arguments)
            for tool, arguments in [
                ("git_push", {}),
                ("open_pull_request", {"title": "x"}),
                ("http_fetch", {"url": f"{world.fetch_url}/allowed/hello"}),
            ]
        ]
    for result in results:
        assert result.is_error and "could not be written, so nothing was done" in result.text
    assert world.git_state.authorized == 0
    assert world.forge_state.auth_headers == [] and world.fetch_state.targets == []


async def test_a_store_that_cannot_be_read_refuses_the_call(world: World) -> None:
    app = create_mcp_app(world.config, world.signer, world.vault, world.audit)
    async with serve_mcp(app, host="127.0.0.1") as ends:
        await world.audit.store.close()  # the database went away under the server
        result = await call(
            ends, world.bearer(), "http_fetch", {"url": f"{world.fetch_url}/allowed/hello"}
        )
    assert result.is_error and "could not be read from the store" in result.text
    assert world.fetch_state.targets == []


async def test_the_intent_is_on_record_before_the_action(
    world: World, endpoints: McpEndpoints
) -> None:
    world.commit_on(BRANCH)
    assert not (await call(endpoints, world.bearer(), "git_push", {})).is_error
    events = await world.audit.log(CONVERSATION)
    assert [(e.tool, e.outcome) for e in events] == [("git_push", "started"), ("git_push", "ok")]
    assert events[0].arguments == {} and events[0].detail == ""


# ------------------------------------------------ finding 5: a bearer outlives its run


@pytest.mark.parametrize(
    ("status", "message"),
    [(ExecutionStatus.FINISHED, "is finished"), (ExecutionStatus.KILLED, "was killed")],
)
async def test_a_bearer_dies_with_its_run(
    world: World, endpoints: McpEndpoints, status: ExecutionStatus, message: str
) -> None:
    bearer = world.bearer(ttl_s=6 * 3600)
    world.commit_on(BRANCH)
    await world.end_run(CONVERSATION, status)
    for tool, arguments in [
        ("git_push", {}),
        ("open_pull_request", {"title": "x"}),
        ("http_fetch", {"url": f"{world.fetch_url}/allowed/hello"}),
        ("comment_on_pull_request", {"body": "hi"}),
    ]:
        result = await call(endpoints, bearer, tool, arguments)
        assert result.is_error and message in result.text, result.text
    assert world.git_state.authorized == 0
    assert world.forge_state.auth_headers == [] and world.fetch_state.targets == []
    # The attempts are on the conversation's record, refused.
    events = await world.audit.log(CONVERSATION)
    assert [e.outcome for e in events] == ["refused"] * 4
    # Another run of the project is not affected.
    other = await call(
        endpoints,
        world.bearer(conversation=OTHER_CONVERSATION),
        "http_fetch",
        {"url": f"{world.fetch_url}/allowed/hello"},
    )
    assert not other.is_error, other.text


async def test_a_dead_bearer_is_not_even_shown_the_tools(
    world: World, endpoints: McpEndpoints
) -> None:
    assert endpoints.url is not None
    bearer = world.bearer()
    assert len(await McpToolClient(endpoints.url, bearer).list_tools()) == 6
    await world.end_run(CONVERSATION)
    with pytest.raises(McpClientError, match="is finished"):
        await McpToolClient(endpoints.url, bearer).list_tools()


async def test_a_bearer_whose_run_reached_its_ceiling_is_refused(world: World) -> None:
    store = world.audit.store
    await store.open_execution(
        execution_id="exec-capped",
        conversation_id=CONVERSATION,
        model="scripted-1",
        provider="scripted",
        cost_ceiling_usd=Decimal("0.01"),
    )
    await store.record_usage("exec-capped", tokens_in=1, tokens_out=1, cost_usd=Decimal("0.02"))
    bearer = _bearer_for(world, "exec-capped")
    app = create_mcp_app(world.config, world.signer, world.vault, world.audit)
    async with serve_mcp(app, host="127.0.0.1") as ends:
        result = await call(ends, bearer, "http_fetch", {"url": f"{world.fetch_url}/allowed/hello"})
    assert result.is_error and "reached its cost ceiling" in result.text
    assert world.fetch_state.targets == []


async def test_a_bearer_of_a_run_never_opened_is_refused(
    world: World, endpoints: McpEndpoints
) -> None:
    bearer = _bearer_for(world, "exec-never-opened")
    result = await call(
        endpoints, bearer, "http_fetch", {"url": f"{world.fetch_url}/allowed/hello"}
    )
    assert result.is_error and "has no ledger row" in result.text
    assert world.fetch_state.targets == []


# ------------------------------------------------ finding 6: option-like and blank ref names


@pytest.mark.parametrize(
    "base",
    [
        "main\n",
        "--upload-pack=x",
        "-x",
        "ma in",
        "main\t",
        "a..b",
        "a@{1}",
        "topic.lock",
        ".hidden",
        "a//b",
        "@",
        "a\\b",
        "main\x00",
        "main\u2028",
        "feature/",
        "x~1",
        "x^",
        "x:y",
        "x?",
        "x*",
        "x[1]",
    ],
)
async def test_a_malformed_base_is_refused_before_the_forge_is_called(
    world: World, endpoints: McpEndpoints, base: str
) -> None:
    result = await call(
        endpoints, world.bearer(), "open_pull_request", {"title": "x", "base": base}
    )
    assert result.is_error and "is not a valid branch name" in result.text, result.text
    assert world.forge_state.auth_headers == []


@pytest.mark.parametrize("branch", [f"{BRANCH}\n", f"-{BRANCH}", f"{BRANCH} "])
async def test_a_malformed_branch_is_refused_by_push(
    world: World, endpoints: McpEndpoints, branch: str
) -> None:
    result = await call(endpoints, world.bearer(), "git_push", {"branch": branch})
    assert result.is_error and "is not a valid branch name" in result.text, result.text
    assert world.git_state.authorized == 0


# ------------------------------------------------ finding 7: allow-listed names resolving inward


async def test_a_listed_name_that_resolves_to_loopback_is_refused(world: World) -> None:
    port = world.fetch_url.rsplit(":", 1)[1]
    async with _serve(world, {"allow": [f"http://localhost:{port}/allowed/"]}) as ends:
        result = await call(
            ends, world.bearer(), "http_fetch", {"url": f"http://localhost:{port}/allowed/hello"}
        )
    assert result.is_error and "resolves to" in result.text and "allow_private" in result.text
    assert world.fetch_state.targets == []


async def test_a_name_pinned_to_a_private_address_needs_allow_private(world: World) -> None:
    port = world.fetch_url.rsplit(":", 1)[1]
    url = f"http://docs.allowed.test:{port}/allowed/hello"
    hosts = {"docs.allowed.test": "127.0.0.1"}
    refused_policy = {"allow": [f"http://docs.allowed.test:{port}/allowed/"], "hosts": hosts}
    async with _serve(world, refused_policy) as ends:
        refused = await call(ends, world.bearer(), "http_fetch", {"url": url})
    assert refused.is_error and "resolves to 127.0.0.1" in refused.text
    assert world.fetch_state.targets == []
    allowed_policy = {
        "allow": [{"url": f"http://docs.allowed.test:{port}/allowed/", "allow_private": True}],
        "hosts": hosts,
    }
    async with _serve(world, allowed_policy) as ends:
        fetched = await call(ends, world.bearer(), "http_fetch", {"url": url})
    assert not fetched.is_error and "hello from the allow-list" in fetched.text
    # The system resolver does not know the name: the connection went to the checked address,
    # and the server still saw the name.
    assert world.fetch_state.hosts == [f"docs.allowed.test:{port}"]


# ------------------------------------------------ property: nothing outside the prefix is served

_ATTACK_SEGMENTS = st.sampled_from(
    [
        "..",
        ".",
        "%2e%2e",
        "%2E.",
        ".%2E",
        "%2e",
        "allowed",
        "private",
        "secret",
        "hello",
        "%2f",
        "..;",
        "%70rivate",
        "%61llowed",
        "",
        "x",
    ]
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(path=st.lists(_ATTACK_SEGMENTS, min_size=1, max_size=6))
async def test_no_url_the_agent_writes_reaches_a_page_outside_the_prefix(
    world: World, endpoints: McpEndpoints, path: list[str]
) -> None:
    url = f"{world.fetch_url}/allowed/" + "/".join(path)
    result = await call(endpoints, world.bearer(), "http_fetch", {"url": url})
    assert "not for agents" not in result.text
    # What the upstream resolved (decoded, dot segments removed) stayed under the prefix.
    assert all(p.startswith("/allowed/") for p in world.fetch_state.served), (
        url,
        world.fetch_state.served,
    )
