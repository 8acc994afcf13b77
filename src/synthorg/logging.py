"""Structured logging: one JSON object per line on stderr, named events."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_configured = False


def configure_logging(level: str = "INFO", *, json: bool = True) -> None:
    """Route structlog and stdlib logging to stderr as JSON (or console text)."""
    global _configured
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=_StderrLogger,
        cache_logger_on_first_use=False,
    )
    _configured = True


class _StderrLogger:
    """Writes each line to whatever ``sys.stderr`` is at that moment.

    Binding the stream at configure time would keep writing to a replaced (and closed)
    stream, e.g. after a test runner captured stderr around one command.
    """

    def __init__(self, *_args: Any) -> None:
        pass

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warning = warn = error = critical = exception = fatal = msg


def get_logger(name: str) -> Any:
    """A structured logger; ``log.info("EVENT_NAME", key=value)``."""
    if not _configured:
        configure_logging()
    return structlog.get_logger(name)
