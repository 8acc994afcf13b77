"""GitHub's webhook payload schemas (extract of @octokit/openapi-webhooks 12.1.0): what a
delivery of each event and action must look like."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from .fake_forge import check

EXTRACT = Path(__file__).parent / "openapi" / "github-webhooks-extract.json"


@cache
def _extract() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(EXTRACT.read_text())
    return data


def problems(name: str, payload: dict[str, Any]) -> list[str]:
    """What is wrong with ``payload`` as a delivery ``name`` (``issues.labeled`` ...)."""
    extract = _extract()
    schema = {
        "$ref": f"#/components/schemas/{extract['events'][name]}",
        "components": extract["components"],
    }
    return check(schema, payload, name)
