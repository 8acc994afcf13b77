"""Prometheus metrics of one app (own registry, so several apps can live in one process)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from synthorg.logging import get_logger

log = get_logger("synthorg.server")


class ServerMetrics:
    """Request, stream and run-control counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "synthorg_http_requests",
            "HTTP requests served.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "synthorg_http_request_duration_seconds",
            "HTTP request latency.",
            ["route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.ws_open = Gauge(
            "synthorg_ws_connections", "Open event WebSockets.", registry=self.registry
        )
        self.ws_frames = Counter(
            "synthorg_ws_frames_sent", "Frames sent on event WebSockets.", registry=self.registry
        )
        self.ws_closed = Counter(
            "synthorg_ws_closed",
            "Event WebSockets closed by the server, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.commands = Counter(
            "synthorg_run_commands",
            "Run commands accepted (create, start, steer, pause, interrupt, cancel, decide, "
            "rollback).",
            ["command"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)


class ObserveRequests:
    """ASGI middleware: count, time and log every HTTP request by its route template."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def observe(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(scope["method"], template, str(status)).inc()
            self.metrics.latency.labels(template).observe(elapsed)
            log.debug(
                "HTTP_REQUEST",
                method=scope["method"],
                route=template,
                status=status,
                duration_ms=round(elapsed * 1000, 2),
            )
