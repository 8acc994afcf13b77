"""The ``[server]`` section: where to listen, stream limits, page sizes, repositories, keys."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from synthorg.paths import synthorg_home
from synthorg.service.repositories import RepositoryPolicy
from synthorg.settings import Settings, section

_ORIGIN = re.compile(
    r"^https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?$|^https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$"
)


class ServerSettings(BaseModel):
    """Settings of the agent server (``[server]`` in the config, ``SYNTHORG__SERVER__*``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(default="127.0.0.1", description="Interface to listen on.")
    port: int = Field(default=8420, ge=0, le=65535, description="TCP port (0 picks a free one).")
    keys_file: Path | None = Field(
        default=None, description="API key file; None = SYNTHORG_HOME/server/keys.json."
    )
    ws_send_queue: int = Field(
        default=256,
        ge=1,
        description="Frames buffered per WebSocket; a consumer that falls further behind is "
        "closed (code 4008) and reconnects with after=<last seq>.",
    )
    ws_stall_timeout_s: float = Field(
        default=5.0,
        ge=0,
        description="How long a full send queue may stay full before the consumer counts as "
        "stalled and is closed (0: close on the first overflow).",
    )
    ws_subscribers_per_conversation: int = Field(
        default=32, ge=1, description="Live WebSocket subscribers allowed per conversation."
    )
    ws_auth_timeout_s: float = Field(
        default=10.0, gt=0, description="Seconds a new WebSocket has to send its auth frame."
    )
    repository_roots: tuple[Path, ...] = Field(
        default=(),
        description="Directories under which clients may name repositories (empty, and no "
        "project in [mcp] projects: every repository is refused). The data dir is never one.",
    )
    max_body_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        description="Largest request body accepted (bytes); larger ones are refused with 413.",
    )
    page_limit_max: int = Field(default=500, ge=1, description="Largest page a client may ask.")
    reconcile_on_start: bool = Field(
        default=True,
        description="Run restart reconciliation at start-up (only one server per database).",
    )

    signin_max_failures: int = Field(
        default=10,
        ge=1,
        description="Failed console sign-ins one client address may make in signin_window_s; "
        "past it every sign-in from that address gets 429 with Retry-After.",
    )
    signin_window_s: float = Field(
        default=300.0, gt=0, description="The window of signin_max_failures, in seconds."
    )

    cors_origins: tuple[str, ...] = Field(
        default=(),
        description="Web console origins (scheme://host[:port]) allowed to call this server from "
        "a browser with an API key (CORS); never '*'. Empty: no cross-origin access.",
    )
    console_backends: tuple[str, ...] = Field(
        default=(),
        description="Other SynthOrg servers (scheme://host[:port]) this server's web console may "
        "switch to; each must list this server's origin in its own cors_origins.",
    )

    forwarded_allow_ips: tuple[str, ...] = Field(
        default=(),
        description="Addresses or networks (CIDR) of reverse proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto are trusted for the client address; empty (the default): none, the "
        "peer's address is the client's.",
    )

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _networks(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        import ipaddress

        for value in values:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise ValueError(
                    f"{value!r} is not an address or network: write e.g. 10.0.0.5 or "
                    "10.0.0.0/24 (no '*': trusting every peer lets any client pick its address)"
                ) from None
        return values

    @field_validator("cors_origins", "console_backends")
    @classmethod
    def _origins(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not _ORIGIN.fullmatch(value):
                raise ValueError(
                    f"{value!r} is not an origin: write scheme://host[:port] (no path, no '*')"
                )
        return values

    def repository_policy(self, settings: Settings) -> RepositoryPolicy:
        """What this server's clients may name as a repository: the roots, the registered
        projects, never the data dir or the key file."""
        from synthorg.mcp.config import McpConfig  # the mcp package imports the SDK: ~2.6 s

        projects = section(settings, "mcp", McpConfig).projects
        return RepositoryPolicy.for_server(
            settings.home,
            roots=self.repository_roots,
            projects=[p.repository for p in projects if p.repository is not None],
            protected=[self.resolved_keys_file(settings.home)],
        )

    def resolved_keys_file(self, home: Path | None = None) -> Path:
        """The key file actually used (under ``home``, default SYNTHORG_HOME)."""
        return self.keys_file or (home or synthorg_home()) / "server" / "keys.json"
