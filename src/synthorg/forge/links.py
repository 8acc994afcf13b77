"""What the console shows of a forge-driven conversation: its project, triggers, issue and pull
request, from what the control plane recorded; a URL is kept only when it is the forge's page
of that very item, over https on the project's configured forge host."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from synthorg.forge.triggers import TRIGGER_EVENTS, TriggerName, trigger_of
from synthorg.store.protocol import DeliveryState, ForgeDeliveryStore

if TYPE_CHECKING:  # the server reads links without loading the MCP package's config
    from synthorg.mcp.config import ForgeConfig

_TITLE_MAX = 300
_ISSUE_TRIGGERS = frozenset(
    {*TRIGGER_EVENTS[TriggerName.LABEL], *TRIGGER_EVENTS[TriggerName.COMMENT]}
)


@dataclass(frozen=True, slots=True)
class ForgeSite:
    """A project's repository on its forge's web side: where its issues and pulls live."""

    base: str  # https://host, no path
    owner: str
    repo: str

    @classmethod
    def of(cls, forge: ForgeConfig) -> ForgeSite | None:
        """The site of a forge section; None when its web address is not https."""
        url = forge.web_base_url or forge.api_base_url
        parts = urlsplit(url)
        try:
            port = f":{parts.port}" if parts.port not in (None, 443) else ""
        except ValueError:  # not a port: nothing to link to
            return None
        if parts.scheme != "https" or not parts.hostname:
            return None
        host = parts.hostname.lower()
        if forge.web_base_url is None and host == "api.github.com":
            host = "github.com"
        return cls(f"https://{host}{port}", forge.owner, forge.repo)

    def link(self, url: object, kind: Literal["issues", "pull"], number: int) -> str | None:
        """``url`` when it is exactly this repository's page of item ``number``, else None."""
        expected = f"{self.base}/{self.owner}/{self.repo}/{kind}/{number}"
        # The whole URL, not its parsed parts: urlsplit forgives spaces, userinfo and dot
        # segments that a browser would follow elsewhere. Forge hosts and names ignore case.
        if not isinstance(url, str) or url.lower() != expected.lower():
            return None
        return url


class ForgeItem(BaseModel):
    """An issue or pull request: its number, its title (untrusted text), its page if checked."""

    model_config = ConfigDict(frozen=True)

    number: int = Field(description="The issue or pull request number.")
    title: str = Field(default="", description="Its title as the forge sent it (untrusted).")
    url: str | None = Field(
        default=None, description="The forge's page of it; None when it failed the check."
    )


class ConversationForge(BaseModel):
    """The forge side of a conversation that forge deliveries drove."""

    model_config = ConfigDict(frozen=True)

    project_id: str = Field(description="The forge project whose webhook drove it.")
    triggers: list[TriggerName] = Field(
        description="The triggers that started or resumed it, sorted."
    )
    issue: ForgeItem | None = Field(default=None, description="The issue it works on.")
    pull: ForgeItem | None = Field(default=None, description="The pull request it opened.")


class ForgeLinks:
    """Reads a conversation's forge side from the store (deliveries and its pull request)."""

    def __init__(self, store: ForgeDeliveryStore, sites: Mapping[str, ForgeSite]) -> None:
        self._store = store
        self._sites = dict(sites)

    async def of(self, conversation_id: str) -> ConversationForge | None:
        """The conversation's forge side; None when no forge delivery drove it."""
        deliveries = await self._store.conversation_deliveries(conversation_id)
        started = [d for d in deliveries if d.state is DeliveryState.STARTED]
        if not started:
            return None
        project = started[0].project_id
        site = self._sites.get(project)
        triggers = sorted({t for d in started if (t := trigger_of(d.event)) is not None})
        issue = None
        origin = next((d for d in started if d.event in _ISSUE_TRIGGERS), None)
        number = _number(origin.issue) if origin is not None else None
        if origin is not None and number is not None:
            item: Any = origin.payload.get("issue")
            item = item if isinstance(item, dict) else {}
            issue = ForgeItem(
                number=number,
                title=str(item.get("title") or "")[:_TITLE_MAX],
                url=site.link(item.get("html_url"), "issues", number) if site else None,
            )
        pull = None
        opened = await self._store.conversation_pull(conversation_id)
        if opened is not None and opened.project_id == project:
            url = site.link(opened.html_url, "pull", opened.number) if site else None
            pull = ForgeItem(number=opened.number, url=url)
        return ConversationForge(project_id=project, triggers=triggers, issue=issue, pull=pull)


def _number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def forge_sites(forges: Mapping[str, ForgeConfig]) -> dict[str, ForgeSite]:
    """The web sites of the projects' forge sections (those served over https)."""
    return {p: site for p, forge in forges.items() if (site := ForgeSite.of(forge)) is not None}
