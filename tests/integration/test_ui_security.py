"""The web pages' security, in-process against real PostgreSQL and Redis: sign-in with an
API key into an encrypted cookie, the key checked again on every page, one CSRF check for
every form, a nonce CSP, tenant isolation, escaping. Each bad request is shown as a page
and changes nothing. (tests/browser drives the same pages in Chromium.)"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable

import anyio
import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from docpipe.settings import get_settings
from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key, revoke_api_key
from docpipe_api.ui.session import COOKIE, SessionCodec
from tests.support.factories import new_run, scalar

SECRETS_KEY = Fernet.generate_key().decode()
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def ui(make_api_client: Callable[..., TestClient]) -> TestClient:
    client = make_api_client(auth="keys", secrets_key=SECRETS_KEY, api_key_rpm=0, client_ip_rpm=0)
    client.follow_redirects = False
    return client


def csrf_token(client: TestClient, path: str = "/ui/sign-in") -> str:
    page = client.get(path)
    assert page.status_code == 200, page.text
    found = TOKEN.search(page.text)
    assert found is not None, "no CSRF token on the page"
    return found.group(1)


def sign_in(client: TestClient, key: str) -> None:
    answer = client.post("/ui/sign-in", data={"api_key": key, "csrf_token": csrf_token(client)})
    assert answer.status_code == 303, answer.text


def run_status(db: Database, run_id: str) -> str:
    return str(scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", run_id))


def test_a_valid_key_signs_in_into_an_encrypted_httponly_strict_cookie(
    ui: TestClient, db: Database
) -> None:
    key = create_api_key(db, "acme", "Ada").plaintext
    token = csrf_token(ui)
    refused = ui.post("/ui/sign-in", data={"api_key": "dp_nope", "csrf_token": token})
    assert refused.status_code == 401
    assert "malformed" in refused.text and 'aria-invalid="true"' in refused.text

    answer = ui.post("/ui/sign-in", data={"api_key": key, "csrf_token": token, "next": "/runs"})
    assert (answer.status_code, answer.headers["location"]) == (303, "/ui/runs")
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/ui", "Max-Age=28800"):
        assert attribute in cookie
    assert "Secure" not in cookie  # plain HTTP here; behind TLS it is (next test)
    value = cookie.split(";")[0].split("=", 1)[1]
    assert key not in value and key not in base64.urlsafe_b64decode(value + "==").decode("latin1")
    home = ui.get("/ui/")
    assert home.status_code == 200 and "Tenant <strong>acme</strong>" in home.text


def test_the_cookie_is_secure_behind_tls_and_next_never_leaves_the_site(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(auth="keys", secrets_key=SECRETS_KEY)
    client.base_url = client.base_url.copy_with(scheme="https")
    client.follow_redirects = False
    key = create_api_key(db, "acme").plaintext
    for target in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        answer = client.post(
            "/ui/sign-in", data={"api_key": key, "next": target, "csrf_token": csrf_token(client)}
        )
        assert answer.headers["location"] == "/ui/"
        assert "Secure" in answer.headers["set-cookie"]


def test_pages_without_a_session_send_you_to_sign_in(ui: TestClient) -> None:
    answer = ui.get("/ui/runs/00000000-0000-0000-0000-000000000000")
    assert answer.status_code == 303
    assert answer.headers["location"] == (
        "/ui/sign-in?why=required&next=/runs/00000000-0000-0000-0000-000000000000"
    )
    assert "Sign in with an API key to see this page." in ui.get(answer.headers["location"]).text
    # The stylesheet and scripts are everyone's: no session, no cookie, but the same headers.
    static = ui.get("/ui/static/app.css")
    assert static.status_code == 200 and "set-cookie" not in static.headers
    assert "content-security-policy" in static.headers and "no-store" not in static.headers.get(
        "cache-control", ""
    )


def test_a_revoked_keys_cookie_sends_you_to_sign_in_with_a_message(
    ui: TestClient, db: Database
) -> None:
    created = create_api_key(db, "acme")
    sign_in(ui, created.plaintext)
    assert ui.get("/ui/").status_code == 200
    revoke_api_key(db, created.key.id)
    answer = ui.get("/ui/")
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/ui/sign-in?why=revoked")
    page = ui.get(answer.headers["location"])
    assert "The API key you signed in with was revoked." in page.text
    assert ui.get("/ui/").status_code == 303  # the cookie no longer holds the key


def test_an_expired_cookie_sends_you_to_sign_in_with_a_message(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    client = make_api_client(auth="keys", secrets_key=SECRETS_KEY, ui_session_max_age_s=60)
    client.follow_redirects = False
    sign_in(client, create_api_key(db, "acme").plaintext)
    value = client.cookies[COOKIE]
    # The same session, made 61 s ago: re-encrypted at that time under the cookie's key.
    fernet = SessionCodec(get_settings()).fernet
    assert fernet is not None
    stale = fernet.encrypt_at_time(fernet.decrypt(value.encode()), int(time.time()) - 61)
    client.cookies.clear()
    client.cookies.set(COOKIE, stale.decode(), path="/ui")
    answer = client.get("/ui/")
    assert answer.headers["location"].startswith("/ui/sign-in?why=expired")
    assert "Your session expired." in client.get(answer.headers["location"]).text
    # A forged cookie is no session at all, without a word about expiry.
    client.cookies.clear()
    client.cookies.set(COOKIE, Fernet(Fernet.generate_key()).encrypt(b"{}").decode(), path="/ui")
    assert client.get("/ui/").headers["location"].startswith("/ui/sign-in?why=required")


def test_forms_without_a_valid_csrf_token_are_refused_and_change_nothing(
    ui: TestClient, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    sign_in(ui, create_api_key(db, "acme").plaintext)
    run_id = new_run(db, tenant_id="acme").run_id
    page = f"/ui/runs/{run_id}"
    token = csrf_token(ui, page)
    other = TestClient(ui.app)
    forged = [
        {},  # missing
        {"csrf_token": "x" * 88},  # forged
        {"csrf_token": base64.urlsafe_b64encode(b"\0" * 64).decode()},  # a mask of nothing
        {"csrf_token": csrf_token(other)},  # another session's
    ]
    for data in forged:
        answer = ui.post(f"{page}/cancel", data=data)
        assert answer.status_code == 403, data
        assert "missing or forged CSRF token" in answer.text
        assert "Nothing was changed" in answer.text
    json_body = ui.post(
        f"{page}/cancel",
        content=json.dumps({"csrf_token": token}),
        headers={"Content-Type": "application/json"},
    )
    assert json_body.status_code == 415
    assert run_status(db, run_id) == "queued"
    assert caplog.text.count("missing or forged CSRF token") == 4
    answer = ui.post(f"{page}/cancel", data={"csrf_token": token})
    assert answer.status_code == 303
    assert run_status(db, run_id) == "cancelled"


def test_every_form_gets_a_fresh_masked_token(ui: TestClient, db: Database) -> None:
    sign_in(ui, create_api_key(db, "acme").plaintext)
    tokens = TOKEN.findall(ui.get("/ui/").text) + TOKEN.findall(ui.get("/ui/").text)
    assert len(tokens) == 2 and len(set(tokens)) == 2
    sign_in(ui, create_api_key(db, "acme").plaintext)  # works with either


def test_another_tenants_run_and_batch_are_not_found_and_stay_as_they_are(
    ui: TestClient, db: Database
) -> None:
    sign_in(ui, create_api_key(db, "acme").plaintext)
    theirs = new_run(db, tenant_id="globex", document_id="their-doc").run_id
    page = ui.get(f"/ui/runs/{theirs}")
    assert page.status_code == 404 and "does not exist" in page.text
    token = csrf_token(ui)
    assert ui.post(f"/ui/runs/{theirs}/cancel", data={"csrf_token": token}).status_code == 404
    assert run_status(db, theirs) == "queued"
    assert ui.get(f"/ui/runs/{theirs}/events").status_code == 404
    globex = {"Authorization": f"Bearer {create_api_key(db, 'globex').plaintext}"}
    batch = ui.post(
        "/batches", json={"documents": [{"id": "g", "text": "TERM\nOne year.\n"}]}, headers=globex
    )
    assert batch.status_code == 202, batch.text
    their_batch = batch.json()["batch_id"]
    for path in ("", "/progress", "/results?format=csv", "/results"):
        assert ui.get(f"/ui/batches/{their_batch}{path}").status_code == 404, path
    assert (
        ui.post(f"/ui/batches/{their_batch}/cancel", data={"csrf_token": token}).status_code == 404
    )
    assert ui.get(f"/batches/{their_batch}", headers=globex).json()["status"] == "running"


def test_every_page_carries_a_nonce_csp_without_unsafe_inline(ui: TestClient, db: Database) -> None:
    sign_in(ui, create_api_key(db, "acme").plaintext)
    run_id = new_run(db, tenant_id="acme").run_id
    for path in ("/ui/sign-in", "/ui/", f"/ui/runs/{run_id}", "/ui/runs/nothing-here"):
        answer = ui.get(path)
        policy = answer.headers["content-security-policy"]
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        nonce = re.search(r"script-src 'nonce-([^']+)'", policy)
        assert nonce is not None
        scripts = re.findall(r"<script[^>]*>", answer.text)
        assert all(f'nonce="{nonce.group(1)}"' in s for s in scripts), path
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["cache-control"] == "no-store"
    assert ui.get(f"/ui/runs/{run_id}").text.count("<script") == 1


def test_html_in_a_url_is_escaped_on_the_page(ui: TestClient, db: Database) -> None:
    sign_in(ui, create_api_key(db, "acme").plaintext)
    answer = ui.get("/ui/runs/<img src=x onerror=alert(1)>")
    assert answer.status_code == 404
    assert "<img" not in answer.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in answer.text


def test_without_a_secrets_key_the_pages_refuse_to_serve(
    make_api_client: Callable[..., TestClient],
) -> None:
    client = make_api_client(auth="keys")
    answer = client.get("/ui/sign-in")
    assert answer.status_code == 503
    assert "DOCPIPE_SECRETS_KEY" in answer.text


def test_sign_out_forgets_the_key(ui: TestClient, db: Database) -> None:
    sign_in(ui, create_api_key(db, "acme").plaintext)
    answer = ui.post("/ui/sign-out", data={"csrf_token": csrf_token(ui, "/ui/")})
    assert answer.headers["location"] == "/ui/sign-in?why=signed-out"
    assert ui.get("/ui/").status_code == 303


def test_a_page_whose_rows_stay_locked_answers_as_the_api_does_and_changes_nothing(
    make_api_client: Callable[..., TestClient], db: Database
) -> None:
    ui = make_api_client(
        auth="keys",
        secrets_key=SECRETS_KEY,
        api_key_rpm=0,
        client_ip_rpm=0,
        database_lock_timeout_s=0.2,
    )
    ui.follow_redirects = False
    key = create_api_key(db, "acme").plaintext
    sign_in(ui, key)
    run_id = new_run(db, tenant_id="acme").run_id
    token = csrf_token(ui, f"/ui/runs/{run_id}")
    with db.transaction() as tx:  # another writer holds the run's row
        tx.conn.execute(b"SELECT 1 FROM pipeline_run WHERE id = %s FOR UPDATE", (run_id,))
        page = ui.post(f"/ui/runs/{run_id}/cancel", data={"csrf_token": token})
        api = ui.post(f"/runs/{run_id}/cancel", headers={"Authorization": f"Bearer {key}"})
    for answer in (page, api):
        assert (answer.status_code, answer.headers["Retry-After"]) == (503, "1"), answer.text
        assert "stayed busy; nothing changed, retry" in answer.text
    assert "<h1>Unavailable</h1>" in page.text
    assert run_status(db, run_id) == "queued"


def test_a_form_whose_body_ends_early_is_answered_as_the_api_answers_it(ui: TestClient) -> None:
    """A browser that goes away in the middle of a form's body: a 400 page, never a 500."""
    messages: list[dict[str, object]] = [
        {"type": "http.request", "body": b"api_key=dp_", "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return messages.pop(0)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/ui/sign-in",
        "raw_path": b"/ui/sign-in",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/x-www-form-urlencoded"),
            (b"content-length", b"400"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    anyio.run(ui.app, scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert start["status"] == 400
    assert b"the request body ended early" in body and b"Traceback" not in body
