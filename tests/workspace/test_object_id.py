"""``is_object_id``: the one check a value from a file or a peer passes before git gets it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synthorg.workspace.git import is_object_id

SHA1 = "0123456789abcdef0123456789abcdef01234567"
SHA256 = SHA1 + "89abcdef0123456789abcdef"


@pytest.mark.parametrize("good", [SHA1, SHA256])
def test_full_ids_pass(good: str) -> None:
    assert is_object_id(good)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        SHA1 + "\n",  # re's ``$`` accepts a trailing newline; this check does not
        SHA1.upper(),
        SHA1[:-1],
        SHA1 + "0",
        "--output=/tmp/x" + SHA1,
        f"{SHA1}..{SHA1}",
        "HEAD",
    ],
)
def test_anything_else_is_refused(bad: str) -> None:
    assert not is_object_id(bad)


@given(st.text())
def test_only_lowercase_hex_of_40_or_64(text: str) -> None:
    expected = len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)
    assert is_object_id(text) is expected
