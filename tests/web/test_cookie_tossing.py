"""Cookie tossing: a page on another port of the same host sets this console's session
cookie to the attacker's session (cookies ignore ports; plain http has no __Host- prefix).
A fresh browser opening the console must not be signed in as the attacker, and a cookie
tossed in later must not turn the signed-in page into the attacker's."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support import free_port

from .conftest import Keys
from .helpers import new_page, sign_in

pytestmark = pytest.mark.browser


async def _attacker_session(url: str, key: str) -> tuple[str, str]:
    async with httpx.AsyncClient(base_url=url) as client:
        signed = await client.post("/console/session", json={"key": key})
    assert signed.status_code == 200, signed.text
    ((name, token),) = signed.cookies.items()
    return name, token


async def _toss(page: Any, name: str, token: str) -> None:
    """Open a page on another port of this host whose server sets the cookie (a response
    header: it also replaces an HttpOnly cookie, which a script could not)."""
    evil = f"http://127.0.0.1:{free_port()}/"
    headers = {"Set-Cookie": f"{name}={token}; Path=/; HttpOnly; SameSite=Strict"}
    await page.route(
        evil, lambda route: route.fulfill(body="tossed", content_type="text/html", headers=headers)
    )
    await page.goto(evil)
    cookies = await page.context.cookies("http://127.0.0.1/")
    assert {(c["name"], c["value"]) for c in cookies} >= {(name, token)}


async def test_a_tossed_cookie_does_not_sign_anyone_in(url: str, keys: Keys, chrome: Any) -> None:
    name, token = await _attacker_session(url, keys.operator)  # olga is the attacker
    assert name == f"synthorg_session_{urlsplit(url).port}"
    page = await new_page(chrome, url)
    await _toss(page, name, token)
    await page.goto(url + "/")
    await page.wait_for_selector("#api-key")  # asked to sign in, not "olga"
    assert await page.locator("#principal").count() == 0
    assert "did not sign in with" in await page.inner_text("#sign-in-error")

    # The victim signs in; a cookie tossed in again is refused, not adopted.
    await sign_in(page, keys.viewer)
    assert await page.inner_text("#principal") == "alice"
    tab = await page.context.new_page()
    await _toss(tab, name, token)
    await page.reload()
    await page.wait_for_selector("#api-key")
    assert await page.locator("#principal:has-text('olga')").count() == 0
    await page.context.close()
