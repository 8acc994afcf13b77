"""The runtime maps an LLM failure to the gateway's error code at its boundary (not by wording)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from synthorg.runtime.files import entrypoint_path


def _events_module() -> ModuleType:
    path = Path(entrypoint_path()).with_name("synthorg_oh_events.py")
    spec = importlib.util.spec_from_file_location("synthorg_oh_events_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _ApiError(Exception):
    def __init__(self, message: str, body: object) -> None:
        super().__init__(message)
        self.body = body


def _wrapped(inner: BaseException) -> Exception:
    try:
        raise inner
    except BaseException as cause:
        try:
            raise RuntimeError("litellm.BadRequestError: the request failed") from cause
        except RuntimeError as outer:
            return outer


BODY = {"error": {"message": "spent", "type": "insufficient_quota", "code": "cost_ceiling_reached"}}


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (_wrapped(_ApiError("402", BODY)), "cost_ceiling_reached"),  # the body of a cause
        (_ApiError("402", BODY["error"]), "cost_ceiling_reached"),  # an unwrapped body
        (f"OpenAIException - {json.dumps(BODY)}", "cost_ceiling_reached"),  # the body in text
        ("the cost ceiling was reached (cost_ceiling_reached)", None),  # words are not a code
        (RuntimeError("connection reset"), None),
        (None, None),
    ],
)
def test_gateway_code(error: object, code: str | None) -> None:
    assert _events_module().gateway_code(error) == code
