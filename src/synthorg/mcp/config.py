"""Configuration of the MCP server: per-project repository, remote, forge and fetch settings."""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from synthorg.domain.ids import ProjectId
from synthorg.errors import ConfigError
from synthorg.mcp.allowlist import parse_entry
from synthorg.mcp.refs import RUN_BRANCH_PREFIX, ref_name_problem

MCP_PATH = "/mcp"
"""Where the server's streamable HTTP endpoint is mounted (on either listener)."""


def _no_userinfo(url: str, what: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError(f"{what} must be an http(s) URL with a host, got {url!r}")
    if parts.username is not None or parts.password is not None:
        # A credential in a URL ends up in logs, error messages and git's config; keep it in
        # the vault (by env var name) instead.
        raise ValueError(
            f"{what} must not embed credentials; put the token in an environment variable "
            "and name it in the project's *_token_env setting"
        )
    return url


class ForgeConfig(BaseModel):
    """A project's forge (GitHub REST shape) for pull requests."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    api_base_url: str = Field(
        default="https://api.github.com",
        description="REST API base; set it for GitHub Enterprise or a compatible forge.",
    )
    owner: str = Field(min_length=1, description="Repository owner (user or organisation).")
    repo: str = Field(min_length=1, description="Repository name on the forge.")
    token_env: str | None = Field(
        default=None, description="Environment variable holding the forge API token."
    )
    default_base: str | None = Field(
        default=None,
        min_length=1,
        description="Base branch when the call names none; unset: the forge repository's "
        "default branch (asked of the forge).",
    )
    base_branches: tuple[str, ...] = Field(
        default=(),
        description="Branches a pull request may be opened into, besides the default base; "
        "never a run branch (synthorg/...).",
    )
    timeout_s: float = Field(default=20.0, gt=0, description="Time cap of one API request.")
    web_base_url: str | None = Field(
        default=None,
        description="The forge's web address, whose issue and pull request pages the console "
        "links; unset: https://github.com for api.github.com, else the API's own host.",
    )

    @field_validator("api_base_url", "web_base_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return None if value is None else _no_userinfo(value, "forge URL").rstrip("/")

    @field_validator("default_base")
    @classmethod
    def _check_base(cls, value: str | None) -> str | None:
        return None if value is None else _base_branch(value, "default_base")

    @field_validator("base_branches")
    @classmethod
    def _check_bases(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_base_branch(name, "base_branches") for name in value)


def _base_branch(name: str, what: str) -> str:
    problem = ref_name_problem(name)
    if problem is not None:
        raise ValueError(f"{what} {name!r} is not a valid branch name: {problem}")
    if name.startswith(RUN_BRANCH_PREFIX):
        # Each run owns its branch: a pull request into one would merge into another run.
        raise ValueError(f"{what} {name!r} is a run branch ({RUN_BRANCH_PREFIX}...), never a base")
    return name


class FetchRule(BaseModel):
    """An allow-list entry with options (a bare string entry is the same without them)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(min_length=1, description="scheme://host[:port][/path], host or '*.host'.")
    allow_private: bool = Field(
        default=False,
        description="The host may resolve to loopback, link-local or private addresses "
        "(an intranet server); refused otherwise.",
    )


class FetchConfig(BaseModel):
    """What ``http_fetch`` may GET for a project, and how much."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow: tuple[str | FetchRule, ...] = Field(
        default=(),
        description="URL prefixes (scheme://host[:port]/path) or bare hosts ('*.host' for "
        "subdomains); empty means http_fetch is refused for the project.",
    )
    hosts: dict[str, str] = Field(
        default_factory=dict,
        description="Fixed addresses of host names (like /etc/hosts), used instead of DNS.",
    )
    max_bytes: int = Field(default=1_048_576, gt=0, description="Response body size cap.")
    timeout_s: float = Field(default=15.0, gt=0, description="Wall-time cap of one fetch.")
    max_redirects: int = Field(default=5, ge=0, description="Redirect hops, each allow-listed.")

    @field_validator("allow")
    @classmethod
    def _check_allow(cls, value: tuple[str | FetchRule, ...]) -> tuple[str | FetchRule, ...]:
        for entry in value:
            if isinstance(entry, str):
                parse_entry(entry)
            else:
                parse_entry(entry.url, allow_private=entry.allow_private)
        return value

    @field_validator("hosts")
    @classmethod
    def _check_hosts(cls, value: dict[str, str]) -> dict[str, str]:
        for name, address in value.items():
            try:
                ipaddress.ip_address(address)
            except ValueError as exc:
                raise ValueError(f"hosts[{name!r}] must be an IP address, got {address!r}") from exc
        return {name.lower().rstrip("."): address for name, address in value.items()}


class ProjectToolConfig(BaseModel):
    """Everything the tools need to act on one project."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project_id: ProjectId = Field(description="The project; bearers name it.")
    repository: Path | None = Field(
        default=None, description="The project's git repository (worktree branches live here)."
    )
    remote_url: str | None = Field(
        default=None, description="Where git_push pushes (http(s) smart-HTTP URL)."
    )
    git_token_env: str | None = Field(
        default=None, description="Environment variable holding the git remote token."
    )
    git_auth: Literal["basic", "bearer"] = Field(
        default="basic", description="How the git token is presented to the remote."
    )
    git_username: str = Field(
        default="x-access-token", description="User name sent with the token for basic auth."
    )
    git_timeout_s: float = Field(default=120.0, gt=0, description="Wall-time cap of one push.")
    protected_branches: tuple[str, ...] = Field(
        default=("main", "master"),
        description="Branches (fnmatch globs allowed) never pushed to.",
    )
    forge: ForgeConfig | None = Field(default=None, description="Forge for pull requests.")
    fetch: FetchConfig = Field(default_factory=FetchConfig, description="http_fetch policy.")

    @field_validator("remote_url")
    @classmethod
    def _check_remote(cls, value: str | None) -> str | None:
        return None if value is None else _no_userinfo(value, "remote_url")


class McpConfig(BaseModel):
    """The MCP server's configuration: projects and the files it reads at start."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    projects: tuple[ProjectToolConfig, ...] = Field(
        default=(), description="Per-project tool settings; a bearer's project must be here."
    )
    signing_key_path: Path | None = Field(
        default=None, description="The gateway's signing key file (bearers are verified with it)."
    )
    vault_path: Path | None = Field(
        default=None, description="Encrypted credential file (Fernet), merged over env values."
    )
    vault_key_path: Path | None = Field(
        default=None, description="The Fernet key file that encrypts vault_path."
    )

    @model_validator(mode="after")
    def _unique_projects(self) -> McpConfig:
        seen: set[str] = set()
        for project in self.projects:
            if project.project_id in seen:
                raise ValueError(f"project {project.project_id!r} is configured twice")
            seen.add(project.project_id)
        return self

    def project(self, project_id: str) -> ProjectToolConfig | None:
        """The settings of ``project_id``, None when it is not configured."""
        return next((p for p in self.projects if p.project_id == project_id), None)


def load_mcp_config(path: Path) -> McpConfig:
    """Read an McpConfig from a TOML or JSON file; ConfigError says what is wrong."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read MCP config {path}: {exc.strerror}") from exc
    try:
        data = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"MCP config {path} is not valid TOML/JSON: {exc}") from exc
    try:
        return McpConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"MCP config {path} is invalid:\n{exc}") from exc
