"""http_fetch: GET a URL on the project's allow-list, size- and time-capped.

What is matched is what is sent: the URL is normalised once, the allow-list judges that form,
and the request line is built from it. Its name is resolved once and the checked address is
dialled. The body is decoded in bounded steps until the size cap, all inside one deadline, and
redacted before it is cut.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import re
import ssl
from urllib.parse import urljoin

import httpcore
from pydantic import BaseModel, ConfigDict, Field

from synthorg.mcp.allowlist import AllowEntry, AllowList, parse_entry
from synthorg.mcp.config import FetchConfig
from synthorg.mcp.decode import ACCEPT_ENCODING, BodyDecoder, DecodeError
from synthorg.mcp.errors import ToolFailedError, ToolRefusedError
from synthorg.mcp.netguard import PinnedBackend, SystemResolver, checked_address
from synthorg.mcp.redact import Redactor, cut
from synthorg.mcp.tools.base import ToolContext
from synthorg.mcp.urls import NormalUrl, UrlError, normalise_url

_REDIRECTS = {301, 302, 303, 307, 308}


@functools.cache
def _tls() -> ssl.SSLContext:
    # Loading the system CA store costs tens of milliseconds: once per process, not per fetch.
    return ssl.create_default_context()


_CHARSET = re.compile(r"charset\s*=\s*\"?([\w.:-]+)", re.IGNORECASE)


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


def allow_list(policy: FetchConfig) -> AllowList:
    """The project's allow-list."""
    return AllowList(
        parse_entry(e) if isinstance(e, str) else parse_entry(e.url, allow_private=e.allow_private)
        for e in policy.allow
    )


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    values = [v.decode("latin-1") for k, v in headers if k.lower() == name]
    return ", ".join(values) if values else None


def _charset(content_type: str) -> str:
    match = _CHARSET.search(content_type)
    if match:
        try:
            return codecs.lookup(match.group(1)).name
        except LookupError:
            pass
    return "utf-8"


class _Page:
    """A fetched page: status, type, the redacted text cut to the cap."""

    def __init__(self, status: int, kind: str, text: str, size: int, truncated: bool) -> None:
        self.status, self.kind, self.text, self.size, self.truncated = (
            status,
            kind,
            text,
            size,
            truncated,
        )


class HttpFetchTool:
    """GETs allow-listed URLs (each redirect hop allow-listed too), capped in size and time."""

    name = "http_fetch"
    description = (
        "HTTP GET a URL on the project's allow-list and return status, content type and the "
        "body as text (truncated at the size cap). URLs off the allow-list are refused."
    )
    args_model = HttpFetchArgs
    read_only = True
    destructive = False
    idempotent = True

    async def run(self, ctx: ToolContext, args: HttpFetchArgs) -> str:
        """Fetch and describe the response."""
        ctx.scope.check_project(args.project_id)
        policy = ctx.scope.project.fetch
        allow = allow_list(policy)
        project = ctx.scope.project.project_id
        try:
            url = normalise_url(args.url)
        except UrlError as exc:
            raise ToolRefusedError(f"URL {args.url!r} cannot be fetched: {exc}") from exc
        if allow.entry_for(url) is None:
            raise ToolRefusedError(
                f"URL {args.url!r} is not on the http_fetch allow-list of project {project!r}"
                + ("" if allow else " (the list is empty: http_fetch is disabled)")
            )
        cap = min(args.max_bytes or policy.max_bytes, policy.max_bytes)
        resolver = SystemResolver(policy.hosts)
        try:
            # One deadline for everything: resolution, connection, every hop, decoding.
            async with asyncio.timeout(policy.timeout_s):
                return await self._follow(ctx.redactor, url, allow, resolver, cap, policy)
        except TimeoutError as exc:
            raise ToolFailedError(f"fetching {url} took longer than {policy.timeout_s:g}s") from exc

    async def _follow(
        self,
        redactor: Redactor,
        url: NormalUrl,
        allow: AllowList,
        resolver: SystemResolver,
        cap: int,
        policy: FetchConfig,
    ) -> str:
        for _ in range(policy.max_redirects + 1):
            entry = allow.entry_for(url)
            if entry is None:  # a redirect target
                raise ToolRefusedError(f"redirect to {str(url)!r}, which is not on the allow-list")
            location, page = await self._get(redactor, url, entry, resolver, cap)
            if page is not None:
                note = f" (truncated at {cap} bytes)" if page.truncated else ""
                return (
                    f"HTTP {page.status} {page.kind} from {url}; {page.size} bytes{note}"
                    f"\n\n{page.text}"
                )
            try:
                target = normalise_url(urljoin(str(url), location or ""))
            except UrlError as exc:
                raise ToolRefusedError(
                    f"{url} redirects to a URL that cannot be fetched: {exc}"
                ) from exc
            if allow.entry_for(target) is None:
                raise ToolRefusedError(
                    f"{url} redirects to {str(target)!r}, which is not on the allow-list"
                )
            url = target
        raise ToolFailedError(f"{url}: more than {policy.max_redirects} redirects")

    async def _get(
        self,
        redactor: Redactor,
        url: NormalUrl,
        entry: AllowEntry,
        resolver: SystemResolver,
        cap: int,
    ) -> tuple[str | None, _Page | None]:
        """(redirect location, None) or (None, the page)."""
        address = await checked_address(url, entry, resolver)
        request = httpcore.URL(
            scheme=url.scheme.encode(),
            host=url.host.encode(),
            port=url.port,
            target=url.target.encode("ascii"),
        )
        headers = [
            (b"Host", url.authority.encode("ascii")),
            (b"User-Agent", b"synthorg-mcp/http_fetch"),
            (b"Accept-Encoding", ACCEPT_ENCODING.encode()),
        ]
        pool = httpcore.AsyncConnectionPool(
            ssl_context=_tls() if url.scheme == "https" else None,
            network_backend=PinnedBackend(address),
            max_connections=1,
            retries=0,
        )
        try:
            async with pool, pool.stream("GET", request, headers=headers) as response:
                location = _header(response.headers, b"location")
                if response.status in _REDIRECTS and location is not None:
                    return location, None
                return None, await self._read(redactor, response, cap)
        except httpcore.TimeoutException as exc:
            raise TimeoutError from exc
        except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise ToolFailedError(f"fetching {url} failed: {type(exc).__name__}: {exc}") from exc

    async def _read(self, redactor: Redactor, response: httpcore.Response, cap: int) -> _Page:
        try:
            decoder = BodyDecoder(_header(response.headers, b"content-encoding") or "")
        except DecodeError as exc:
            raise ToolFailedError(str(exc)) from exc
        # Read past the cap by the longest secret form, so a secret straddling the cap is
        # whole when it is redacted; then cut.
        want = cap + redactor.longest + 1
        raw_limit = 2 * want + 4096  # compressed input that decodes to (almost) nothing
        body = bytearray()
        raw = 0
        source_cut = False
        stream = response.aiter_stream()
        try:
            async for chunk in stream:
                raw += len(chunk)
                for piece in decoder.feed(chunk):
                    body += piece
                    if len(body) >= want:
                        break
                    await asyncio.sleep(0)  # one bounded step at a time: the loop stays live
                if len(body) >= want or raw >= raw_limit:
                    source_cut = True
                    break
            else:
                for piece in decoder.flush():
                    body += piece
                    if len(body) >= want:
                        source_cut = True
                        break
                    await asyncio.sleep(0)
        except DecodeError as exc:
            raise ToolFailedError(str(exc)) from exc
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        kind = _header(response.headers, b"content-type") or "unknown"
        text = bytes(body[:want]).decode(_charset(kind), "replace")
        text = redactor.text(text, source_cut=source_cut)
        encoded = text.encode("utf-8")
        truncated = source_cut or len(encoded) > cap
        if len(encoded) > cap:
            text = cut(text, len(encoded[:cap].decode("utf-8", "ignore")))
        return _Page(response.status, kind, text, len(text.encode("utf-8")), truncated)
