"""The web pages' sessions live on the server: signing out ends one there, so its cookie,
copied or kept, opens nothing afterwards. Behind a proxy uvicorn trusts (here: the test
itself, from 127.0.0.1, uvicorn's default), what the proxy says counts: the cookie is
Secure when the original request was HTTPS, HSTS is sent, and the per-client limit sees
the client's own address. A real uvicorn process for those; real PostgreSQL and Redis."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_api.ui.session import COOKIE
from tests.support.factories import scalar

SECRETS_KEY = Fernet.generate_key().decode()
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def signed_in(client: TestClient, key: str) -> None:
    page = client.get("/ui/sign-in")
    found = TOKEN.search(page.text)
    assert found is not None, page.text
    answer = client.post("/ui/sign-in", data={"api_key": key, "csrf_token": found.group(1)})
    assert answer.status_code == 303, answer.text


def test_a_cookie_replayed_after_signing_out_is_refused(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    browser = make_api_client(auth="keys", secrets_key=SECRETS_KEY, client_ip_rpm=0)
    browser.follow_redirects = False
    signed_in(browser, create_api_key(db, "acme").plaintext)
    assert scalar(db, "SELECT count(*) FROM web_session WHERE ended_at IS NULL") == 1
    # Someone who copied the cookie, in a browser of their own.
    copy = make_api_client(auth="keys", secrets_key=SECRETS_KEY, client_ip_rpm=0)
    copy.follow_redirects = False
    copy.cookies.set(COOKIE, browser.cookies[COOKIE], path="/ui")

    def replay() -> httpx.Response:
        return copy.get("/ui/")

    assert replay().status_code == 200, "the copy works while the session lives"
    home = browser.get("/ui/")
    token = TOKEN.search(home.text)
    assert token is not None
    out = browser.post("/ui/sign-out", data={"csrf_token": token.group(1)})
    assert out.headers["location"] == "/ui/sign-in?why=signed-out"
    assert scalar(db, "SELECT count(*) FROM web_session WHERE ended_at IS NOT NULL") == 1

    refused = replay()
    assert refused.status_code == 303
    assert refused.headers["location"].startswith("/ui/sign-in?why=ended")
    shown = copy.get(refused.headers["location"])
    assert "This session was signed out. Sign in again." in shown.text


def cookie_of(answer: httpx.Response) -> str:
    """The session cookie an answer sets, as a Cookie header sends it back (the proxy in
    front of uvicorn speaks HTTPS to the browser, so a Secure cookie does come back)."""
    return answer.headers["set-cookie"].split(";")[0]


def test_behind_a_trusted_proxy_the_original_scheme_and_client_count(
    start_api: Callable[..., str], db: Database
) -> None:
    api = start_api(
        DOCPIPE_AUTH="keys",
        DOCPIPE_SECRETS_KEY=SECRETS_KEY,
        DOCPIPE_HSTS_MAX_AGE_S="31536000",
        DOCPIPE_CLIENT_IP_RPM="3",
    )
    key = create_api_key(db, "acme").plaintext
    client = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    with httpx.Client(base_url=api, follow_redirects=False, timeout=10) as proxy:
        page = proxy.get("/ui/sign-in", headers=client)
        assert "Secure" in page.headers["set-cookie"]
        assert page.headers["strict-transport-security"] == "max-age=31536000; includeSubDomains"
        token = TOKEN.search(page.text)
        assert token is not None
        signed = proxy.post(
            "/ui/sign-in",
            data={"api_key": key, "csrf_token": token.group(1)},
            headers={**client, "Cookie": cookie_of(page)},
        )
        assert signed.status_code == 303, signed.text
        assert (
            "Secure" in signed.headers["set-cookie"] and "HttpOnly" in signed.headers["set-cookie"]
        )
        session = {**client, "Cookie": cookie_of(signed)}
        assert proxy.get("/ui/", headers=session).status_code == 200
        # That client's fourth request this minute is one too many ...
        limited = proxy.get("/ui/", headers=session)
        assert limited.status_code == 429, limited.text
        # ... and the limit is its own: another client behind the same proxy is served.
        other = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.9"}
        assert proxy.get("/ui/sign-in", headers=other).status_code == 200
    with httpx.Client(base_url=api, follow_redirects=False, timeout=10) as plain:
        answer = plain.get("/ui/sign-in", headers={"X-Forwarded-For": "192.0.2.1"})
        assert "Secure" not in answer.headers["set-cookie"], "plain HTTP: no Secure cookie"
        assert "strict-transport-security" not in answer.headers
