"""Sign-in, the session cookie, CSRF, sign-out and the security headers, in a real browser."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import Keys
from .helpers import new_page, sign_in

pytestmark = pytest.mark.browser


async def test_security_headers_on_the_page(url: str) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        page = await client.get("/")
        asset = await client.get("/console/static/app.js")
    assert page.status_code == 200 and asset.status_code == 200
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    for response in (page, asset):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    assert "<script>" not in page.text  # no inline script: only <script type=module src=...>
    assert asset.headers["content-type"].startswith("text/javascript")


async def test_sign_in_cookie_csrf_and_sign_out(
    url: str, keys: Keys, chrome: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    page = await new_page(chrome, url)
    await sign_in(page, keys.operator)
    assert await page.text_content("#principal") == "olga"

    cookies = await page.context.cookies()
    assert len(cookies) == 1
    cookie = cookies[0]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert not cookie["secure"]  # plain HTTP here; under TLS the cookie is Secure (__Host-)
    assert keys.operator not in cookie["value"]
    # The key is nowhere the page keeps things, nor in its address.
    stored = await page.evaluate(
        "JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage), "
        "document.cookie, location.href])"
    )
    assert keys.operator not in stored and "so_" not in stored

    jar = {cookie["name"]: cookie["value"]}
    async with httpx.AsyncClient(base_url=url, cookies=jar) as client:
        # The cookie reads; a mutating call without the CSRF token is refused.
        assert (await client.get("/api/conversations")).status_code == 200
        forged = await client.post("/api/conversations/conv-x/pause")
        assert forged.status_code == 403 and "CSRF" in forged.json()["detail"]
        csrf = (await client.get("/console/session")).json()["csrf"]
        wrong = await client.post(
            "/api/conversations/conv-x/pause", headers={"X-CSRF-Token": csrf[:-2] + "xx"}
        )
        assert wrong.status_code == 403
        right = await client.post("/api/conversations/conv-x/pause", headers={"X-CSRF-Token": csrf})
        assert right.status_code == 404  # authenticated and allowed: the conversation is unknown

    await page.click("#sign-out")
    await page.wait_for_selector("#api-key")
    assert await page.context.cookies() == []
    async with httpx.AsyncClient(base_url=url, cookies=jar) as client:
        assert (await client.get("/api/conversations")).status_code == 401
        assert (await client.get("/console/session")).status_code == 401
    await page.context.close()
    out, err = capfd.readouterr()
    assert keys.operator not in out + err  # the key is in no log line


async def test_a_wrong_key_is_refused_and_a_cross_site_sign_in_too(
    url: str, keys: Keys, chrome: Any
) -> None:
    page = await new_page(chrome, url)
    await page.fill("#api-key", "so_nope_" + "x" * 40)
    await page.click("form button[type=submit]")
    await page.wait_for_selector("#sign-in-error:has-text('not valid')")
    assert await page.context.cookies() == []
    async with httpx.AsyncClient(base_url=url) as client:
        cross = await client.post(
            "/console/session", json={"key": keys.operator}, headers={"Origin": "https://evil.test"}
        )
    assert cross.status_code == 403 and "set-cookie" not in cross.headers
    await page.context.close()


async def test_the_socket_takes_the_session_token_only_with_its_cookie_from_this_origin(
    url: str, keys: Keys, repo: Any
) -> None:
    import json

    import websockets

    async with httpx.AsyncClient(base_url=url) as client:
        signed = await client.post("/console/session", json={"key": keys.viewer})
        csrf = signed.json()["csrf"]
        cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
        created = await client.post(
            "/api/conversations",
            json={"repository": str(repo), "prompt": "x", "start": False},
            headers={"Authorization": f"Bearer {keys.operator}"},
        )
    cid = created.json()["id"]
    ws_url = url.replace("http", "ws") + f"/api/conversations/{cid}/events/ws?after=0"

    async def first_frame(headers: dict[str, str]) -> tuple[str | None, int | None]:
        async with websockets.connect(ws_url, additional_headers=headers) as ws:
            await ws.send(json.dumps({"type": "auth", "token": csrf}))
            try:
                return json.loads(await ws.recv())["type"], None
            except websockets.ConnectionClosed as closed:
                return None, closed.rcvd.code if closed.rcvd else None

    assert await first_frame({"Origin": url, "Cookie": cookie}) == ("subscribed", None)
    # Cross-site WebSocket hijacking: the cookie rides along, the origin is foreign.
    assert await first_frame({"Origin": "http://evil.test", "Cookie": cookie}) == (None, 4401)
    # The token alone (a stolen CSRF token) is no key.
    assert await first_frame({"Origin": url}) == (None, 4401)


def _self_signed(directory: Any) -> tuple[str, str]:
    """A throwaway certificate for 127.0.0.1 (the test's own TLS server)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


async def test_over_tls_the_cookie_is_secure_and_host_bound(
    console_app: Any, keys: Keys, repo: Any, tmp_path: Any, chrome: Any
) -> None:
    import asyncio

    import uvicorn

    from synthorg.server.websocket_protocol import ClosingSafeWebSocketProtocol
    from tests.support import free_port

    cert, key = _self_signed(tmp_path)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            console_app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            ssl_certfile=cert,
            ssl_keyfile=key,
            ws=ClosingSafeWebSocketProtocol,  # as synthorg serve runs it
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done()
            await asyncio.sleep(0.01)
        base = f"https://127.0.0.1:{port}"
        page = await new_page(chrome, base, ignore_https_errors=True)
        await sign_in(page, keys.operator)
        [cookie] = await page.context.cookies()
        assert cookie["secure"] and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert cookie["name"].startswith("__Host-")
        # The page works over TLS: list and the live socket (wss) with the secure cookie.
        async with httpx.AsyncClient(
            base_url=base, verify=False, headers={"Authorization": f"Bearer {keys.operator}"}
        ) as client:
            created = await client.post(
                "/api/conversations",
                json={"repository": str(repo), "prompt": "over tls", "start": False},
            )
        await page.goto(f"{base}/#/c/{created.json()['id']}")
        await page.wait_for_selector("#conn.live")
        await page.context.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
