"""The web pages' home, runs and batches in-process against real PostgreSQL and Redis: the
home page is a dashboard of the signed-in tenant's work (batches with their progress and
cost, recent runs, runs by status, the review backlog and its oldest age, a search by
document name), GET /dashboard answers its figures, and /ui/runs and /ui/batches list them
with filters, a page at a time. (tests/browser clicks the same pages in Chromium;
tests/integration/test_cli_lists.py runs docpipe dashboard.)"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_api.ui.routes.home import counted
from tests.support.factories import new_run

TENANT = "acme"
STEP = DOCUMENT_EXTRACT.step_names[1]
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def ui(make_api_client: Callable[..., TestClient], db: Database) -> TestClient:
    client = make_api_client(
        auth="keys", secrets_key=Fernet.generate_key().decode(), api_key_rpm=0, client_ip_rpm=0
    )
    client.follow_redirects = False
    token = TOKEN.search(client.get("/ui/sign-in").text)
    assert token is not None
    key = create_api_key(db, TENANT, "Ada").plaintext
    signed = client.post("/ui/sign-in", data={"api_key": key, "csrf_token": token.group(1)})
    assert signed.status_code == 303
    client.headers["Authorization"] = f"Bearer {key}"  # for the API's own routes
    return client


def run_of(db: Database, name: str, tenant: str = TENANT) -> str:
    return new_run(db, document_id=name, key=name, tenant_id=tenant).run_id


def to_review(db: Database, run_id: str) -> None:
    claim = runs.claim_step(db, run_id, STEP, owner="w", lease_s=30)
    assert claim is not None
    assert runs.fail_run(
        db, run_id, STEP, owner="w", status="needs_review", error="x", review_reason="rule"
    )


def figure(page: str, name: str) -> str:
    found = re.search(rf'data-count="{name}">([^<]*)<', page)
    assert found is not None, name
    return found.group(1)


def test_the_home_page_is_the_tenants_dashboard(ui: TestClient, db: Database) -> None:
    for name in ("contract-a.txt", "contract-b.pdf", "lease-c.txt"):
        run_of(db, name)
    cancelled = run_of(db, "nda-d.txt")
    assert runs.cancel_run(db, TENANT, cancelled)
    waiting = run_of(db, "invoice-e.txt")
    to_review(db, waiting)
    run_of(db, "theirs.txt", tenant="other")  # another tenant's: never counted, never shown
    documents = [{"id": f"b-{i}.txt", "text": f"B{i}\n1. ONE\nText.\n"} for i in range(3)]
    batch = ui.post("/batches", json={"documents": documents, "budget_usd": 5})
    assert batch.status_code == 202, batch.text
    batch_id = batch.json()["batch_id"]

    answer = ui.get("/ui/")
    assert answer.status_code == 200, answer.text
    page = answer.text
    assert figure(page, "queued") == "6" and figure(page, "running") == "0"
    assert figure(page, "cancelled") == "1" and figure(page, "done") == "0"
    assert figure(page, "review") == "1"
    assert re.search(r"the oldest for \d+ s", page)
    # The batch: its progress (0 of 3 ended), its cost of its budget, a link to its page.
    row = page[page.index(f'href="/ui/batches/{batch_id}"') :].split("</tr>")[0]
    assert '<progress max="3" value="0"' in row and "0 of 3" in row
    assert "$0.0000" in row and "of $5.0000" in row
    # The recent runs, newest first, each a link to its page; the other tenant's is absent.
    recent = page[page.index('id="runs"') :]
    names = re.findall(r'<th scope="row"><a href="/ui/runs/[^"]+">([^<]+)</a>', recent)
    assert set(names[:3]) == {"b-0.txt", "b-1.txt", "b-2.txt"}  # one batch: one instant
    assert names[3:7] == ["invoice-e.txt", "nda-d.txt", "lease-c.txt", "contract-b.pdf"]
    assert "theirs.txt" not in page
    assert 'role="search"' in page and 'name="document"' in page


def test_the_api_answers_the_dashboards_figures(ui: TestClient, db: Database) -> None:
    for name in ("contract-a.txt", "contract-b.pdf"):
        run_of(db, name)
    cancelled = run_of(db, "nda-c.txt")
    assert runs.cancel_run(db, TENANT, cancelled)
    waiting = run_of(db, "invoice-d.txt")
    to_review(db, waiting)
    run_of(db, "theirs.txt", tenant="other")  # another tenant's: never counted, never shown
    documents = [{"id": f"b-{i}.txt", "text": f"B{i}\n1. ONE\nText.\n"} for i in range(2)]
    batch = ui.post("/batches", json={"documents": documents, "budget_usd": 5})
    assert batch.status_code == 202, batch.text

    answer = ui.get("/dashboard")
    assert answer.status_code == 200, answer.text
    home = answer.json()
    by_status = home["runs_by_status"]
    assert (by_status["queued"], by_status["running"], by_status["needs_review"]) == (4, 0, 1)
    assert (by_status["cancelled"], by_status["done"], by_status["failed"]) == (1, 0, 0)
    assert home["review_waiting"] == 1 and home["cap"] == 10_000
    now = datetime.now(UTC)
    oldest = datetime.fromisoformat(home["review_oldest_since"])
    assert now - timedelta(minutes=5) < oldest <= now
    assert now - timedelta(hours=24, minutes=5) < datetime.fromisoformat(home["ended_since"])
    [listed] = home["batches"]
    assert listed["batch_id"] == batch.json()["batch_id"]
    assert (listed["runs_total"], listed["runs_ended"], listed["budget_usd"]) == (2, 0, 5.0)
    names = [r["document_id"] for r in home["runs"]]
    assert set(names[:2]) == {"b-0.txt", "b-1.txt"}  # one batch: one instant
    assert names[2:] == ["invoice-d.txt", "nda-c.txt", "contract-b.pdf", "contract-a.txt"]
    # The page shows the same figures.
    page = ui.get("/ui/").text
    assert figure(page, "queued") == "4" and figure(page, "review") == "1"
    # Another tenant sees its own work only; without a key, nothing.
    other = create_api_key(db, "other", "Bo").plaintext
    theirs = ui.get("/dashboard", headers={"Authorization": f"Bearer {other}"}).json()
    assert [r["document_id"] for r in theirs["runs"]] == ["theirs.txt"]
    assert theirs["batches"] == [] and theirs["review_waiting"] == 0
    assert ui.get("/dashboard", headers={"Authorization": ""}).status_code == 401


def test_runs_are_found_by_document_name_status_and_batch(ui: TestClient, db: Database) -> None:
    for name in ("contract-2024-a.txt", "contract-2024-b.txt", "contract-2023.txt", "memo.txt"):
        run_of(db, name)
    found = ui.get("/ui/runs", params={"document": "contract-2024"})
    assert found.status_code == 200, found.text
    names = re.findall(r'<a href="/ui/runs/[^"]+">([^<]+)</a>', found.text)
    assert names == ["contract-2024-b.txt", "contract-2024-a.txt"]
    assert 'value="contract-2024"' in found.text  # the search is kept in its box
    none = ui.get("/ui/runs", params={"document": "zzz", "status": "done"}).text
    assert "No run with these filters." in none
    assert '<option value="done" selected>done</option>' in none  # the filter is kept too
    run_id = run_of(db, "opened.txt")
    opened = ui.get("/ui/runs", params={"run_id": run_id})
    assert opened.status_code == 303 and opened.headers["location"] == f"/ui/runs/{run_id}"
    bad = ui.get("/ui/runs", params={"status": "finished"})
    assert bad.status_code == 422 and "is not a run status" in html.unescape(bad.text)


def test_runs_and_batches_come_a_page_at_a_time(ui: TestClient, db: Database) -> None:
    for i in range(55):
        run_of(db, f"doc-{i:02d}.txt")
    first = ui.get("/ui/runs").text
    assert first.count('<th scope="row">') == 50
    older = re.search(r'<a href="/ui/runs\?([^"]+)">Older runs</a>', first)
    assert older is not None
    rest = ui.get(f"/ui/runs?{html.unescape(older.group(1))}").text
    assert rest.count('<th scope="row">') == 5 and "Older runs" not in rest
    assert "doc-00.txt" in rest and "doc-00.txt" not in first


def test_the_batches_page_lists_batches_where_it_answered_422(ui: TestClient, db: Database) -> None:
    """/ui/batches was the home page's "open a batch" form, a 422 without a batch_id; it is
    the list of batches now (and still opens one by id)."""
    empty = ui.get("/ui/batches")
    assert empty.status_code == 200 and "No batch." in empty.text
    ids = []
    for n in range(2):
        documents = [{"id": f"n{n}-{i}.txt", "text": f"N\n1. ONE\nText {i}.\n"} for i in range(2)]
        ids.append(ui.post("/batches", json={"documents": documents}).json()["batch_id"])
    of_first = ui.get("/runs", params={"batch_id": ids[0], "limit": 1}).json()["runs"]
    to_review(db, of_first[0]["run_id"])
    listed = ui.get("/ui/batches")
    assert listed.status_code == 200
    assert listed.text.index(ids[1][:8]) < listed.text.index(ids[0][:8])  # newest first
    assert listed.text.count("<progress") == 2
    running = ui.get("/ui/batches", params={"status": "running", "needs_review": ""}).text
    assert running.count("<progress") == 2
    reviewed = ui.get("/ui/batches", params={"needs_review": "true"}).text
    assert reviewed.count("<progress") == 1 and ids[0][:8] in reviewed
    assert f'href="/ui/reviews?batch_id={ids[0]}">1</a>' in reviewed
    done = ui.get("/ui/batches", params={"status": "done"}).text
    assert "No batch with these filters." in done
    assert '<option value="done" selected>done</option>' in done
    opened = ui.get("/ui/batches", params={"batch_id": ids[0]})
    assert opened.status_code == 303 and opened.headers["location"] == f"/ui/batches/{ids[0]}"


def test_a_count_at_its_cap_says_at_least() -> None:
    assert (counted(9_999, 10_000), counted(10_000, 10_000)) == ("9,999", "10,000+")
