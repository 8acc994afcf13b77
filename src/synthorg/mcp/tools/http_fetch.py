"""http_fetch: GET a URL on the project's allow-list, size- and time-capped."""

from __future__ import annotations

import asyncio

import httpx
from pydantic import BaseModel, ConfigDict, Field

from synthorg.mcp.allowlist import AllowList
from synthorg.mcp.errors import ToolFailedError, ToolRefusedError
from synthorg.mcp.tools.base import ToolContext

_REDIRECTS = {301, 302, 303, 307, 308}


class HttpFetchArgs(BaseModel):
    """Arguments of http_fetch."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=4096, description="The http(s) URL to GET.")
    max_bytes: int | None = Field(
        default=None, gt=0, description="Lower size cap for this call (the project's cap holds)."
    )
    project_id: str | None = Field(
        default=None, description="Project to act on; only the run's own project is allowed."
    )


class HttpFetchTool:
    """GETs allow-listed URLs (each redirect hop allow-listed too), capped in size and time."""

    name = "http_fetch"
    description = (
        "HTTP GET a URL on the project's allow-list and return status, content type and the "
        "body as text (truncated at the size cap). URLs off the allow-list are refused."
    )
    args_model = HttpFetchArgs

    async def run(self, ctx: ToolContext, args: HttpFetchArgs) -> str:
        """Fetch and describe the response."""
        ctx.scope.check_project(args.project_id)
        policy = ctx.scope.project.fetch
        allow = AllowList(policy.allow)
        if not allow.allows(args.url):
            raise ToolRefusedError(
                f"URL {args.url!r} is not on the http_fetch allow-list of project "
                f"{ctx.scope.project.project_id!r}"
                + ("" if allow else " (the list is empty: http_fetch is disabled)")
            )
        cap = min(args.max_bytes or policy.max_bytes, policy.max_bytes)
        try:
            async with asyncio.timeout(policy.timeout_s):
                return await self._fetch(args.url, allow, cap, policy.max_redirects)
        except TimeoutError as exc:
            raise ToolFailedError(
                f"fetching {args.url} took longer than {policy.timeout_s:g}s"
            ) from exc

    async def _fetch(self, url: str, allow: AllowList, cap: int, max_redirects: int) -> str:
        # trust_env=False: no proxy or .netrc credentials from the server's environment.
        async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:
            for _ in range(max_redirects + 1):
                try:
                    async with client.stream(
                        "GET", url, headers={"user-agent": "synthorg-mcp/http_fetch"}
                    ) as response:
                        if response.status_code in _REDIRECTS and "location" in response.headers:
                            target = str(response.url.join(response.headers["location"]))
                            if not allow.allows(target):
                                raise ToolRefusedError(
                                    f"{url} redirects to {target!r}, which is not on the allow-list"
                                )
                            url = target
                            continue
                        body = bytearray()
                        truncated = False
                        async for chunk in response.aiter_bytes():
                            body.extend(chunk)
                            if len(body) > cap:
                                truncated = True
                                del body[cap:]
                                break
                        kind = response.headers.get("content-type", "unknown")
                        status = response.status_code
                except httpx.HTTPError as exc:
                    raise ToolFailedError(f"fetching {url} failed: {exc}") from exc
                note = f" (truncated at {cap} bytes)" if truncated else ""
                text = body.decode(response.encoding or "utf-8", "replace")
                return f"HTTP {status} {kind} from {url}; {len(body)} bytes{note}\n\n{text}"
        raise ToolFailedError(f"{url}: more than {max_redirects} redirects")
