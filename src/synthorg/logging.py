"""Structured logging: one JSON object per line on stderr, named events.

structlog is imported by the first log line, not before: importing it costs ~0.1 s of CPU
(its ``dev`` module loads rich's traceback and pretty printers), which a command that logs
nothing (``synthorg conversations list``) should not pay. Every module logs through
:func:`get_logger`, so the configuration is always applied before a line is written.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

_configured = False
_pending: tuple[str, bool] | None = None


def configure_logging(level: str = "INFO", *, json: bool = True) -> None:
    """Route structlog to stderr as JSON (or console text).

    Applied at once when structlog is already loaded, else by the first log line.
    """
    global _pending
    _pending = (level, json)
    if "structlog" in sys.modules:
        _apply()


def _apply() -> None:
    global _configured, _pending
    import structlog

    level, json = _pending or ("INFO", True)
    _pending = None
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
    return _LazyLogger(name)


class _LazyLogger:
    """structlog's logger for ``name``, looked up (and logging configured) on each use."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if _pending is not None or not _configured:
            _apply()
        import structlog

        return getattr(structlog.get_logger(self._name), attr)
