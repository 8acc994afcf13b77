"""Prometheus metrics of one gateway app (its own registry, so several apps can coexist)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from synthorg.gateway.ticket import Ticket

_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300)


@dataclass(frozen=True, slots=True)
class _Children:
    requests: Counter
    latency: Histogram
    tokens_in: Counter
    tokens_out: Counter
    cost: Counter


class GatewayMetrics:
    """Requests, refusals, tokens, cost, latency and ceiling kills."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "synthorg_gateway_requests",
            "Chat requests answered.",
            ["provider", "model", "status"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "synthorg_gateway_refusals",
            "Chat requests refused before reaching a provider.",
            ["code"],
            registry=self.registry,
        )
        self.tokens = Counter(
            "synthorg_gateway_tokens",
            "Tokens metered.",
            ["model", "direction"],
            registry=self.registry,
        )
        self.cost = Counter(
            "synthorg_gateway_cost_usd", "Cost metered in USD.", ["model"], registry=self.registry
        )
        self.kills = Counter(
            "synthorg_gateway_ceiling_kills",
            "Executions killed at their cost ceiling.",
            registry=self.registry,
        )
        self.overreports = Counter(
            "synthorg_gateway_upstream_overreport",
            "Answers whose reported usage cost more than the request was admitted for, by"
            " provider (each kills its run: a provider counted here ignores caps or lies).",
            ["provider"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "synthorg_gateway_request_seconds",
            "Request latency through the gateway.",
            ["model"],
            buckets=_BUCKETS,
            registry=self.registry,
        )

        self._children: dict[tuple[str, str, int], _Children] = {}
        """The labelled series of each (provider, model, status), looked up once: each
        ``labels()`` call takes the metric's lock and validates the label values."""

    def _of(self, provider: str, model: str, status: int) -> _Children:
        key = (provider, model, status)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = _Children(
                requests=self.requests.labels(provider, model, str(status)),
                latency=self.latency.labels(model),
                tokens_in=self.tokens.labels(model, "in"),
                tokens_out=self.tokens.labels(model, "out"),
                cost=self.cost.labels(model),
            )
        return children

    def refused(self, code: str) -> None:
        """Count a refusal."""
        self.refusals.labels(code).inc()

    def observe(self, ticket: Ticket, status: int, latency_s: float) -> None:
        """Count an answered request."""
        children = self._of(ticket.claims.provider, ticket.model, status)
        children.requests.inc()
        children.latency.observe(latency_s)
        if ticket.usage is not None:
            children.tokens_in.inc(ticket.usage.prompt_tokens)
            children.tokens_out.inc(ticket.usage.completion_tokens)
        if ticket.cost:
            children.cost.inc(float(ticket.cost))
        if ticket.overreport:
            self.overreports.labels(ticket.claims.provider).inc()
        elif ticket.killed:
            self.kills.inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition body and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
