"""The docs site builds strictly without the network, its reference pages are generated
from the code, and nothing a user or an operator meets is left undocumented: a setting,
a metric, an alert, a chart value or a CLI option without a description fails here, with
what to add."""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic.fields import FieldInfo

from docpipe.observability import metrics as observability_metrics
from docpipe.settings import Settings
from docpipe_dev import reference
from docpipe_dev.reference import alerts, chart, cli, http_api, metrics, settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI builds it, with every proxy pointing nowhere: a build that
    reached for the network would fail."""
    target = tmp_path_factory.mktemp("site")
    nowhere = "http://127.0.0.1:9"
    env = {
        **os.environ,
        "NO_MKDOCS_2_WARNING": "1",
        "HTTP_PROXY": nowhere,
        "HTTPS_PROXY": nowhere,
        "http_proxy": nowhere,
        "https_proxy": nowhere,
    }
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return target


def text_of(site: Path, page: str) -> str:
    """A built page's text, whitespace made single spaces."""
    text = html.unescape(re.sub(r"<[^>]+>", "", (site / page / "index.html").read_text()))
    return " ".join(text.split())


def test_everything_is_documented() -> None:
    missing = reference.undocumented()
    assert missing == [], "\n".join(missing)


@pytest.mark.slow  # the site build (make lint builds it too)
def test_the_reference_pages_list_what_the_code_has(site: Path) -> None:
    settings_page = text_of(site, "reference/settings")
    for name, field in Settings.model_fields.items():
        assert f"DOCPIPE_{name.upper()}" in settings_page
        words = (field.description or "").replace("`", "").split()
        assert " ".join(words[:4]) in settings_page, name
    metrics_page = text_of(site, "reference/metrics")
    assert all(m.name in metrics_page for m in metrics.recorded() + metrics.scraped())
    cli_page = text_of(site, "reference/cli")
    assert all(
        f"docpipe {c}" in cli_page
        for c in ("submit", "results", "batch cancel", "api-key revoke", "completion")
    )
    runbook = (site / "operations/runbook/index.html").read_text()
    for name, alert in alerts.alerts().items():
        assert f'id="{name.lower()}"' in runbook, name
        assert alert.annotations["runbook_url"].endswith(f"/operations/runbook/#{name.lower()}")
    chart_page = text_of(site, "reference/chart-values")
    assert all(v.path in chart_page for v in chart.values())
    published = json.loads((site / "reference/openapi.json").read_text())
    assert published == http_api.openapi_document()
    api_page = text_of(site, "reference/http-api")
    assert all(path in api_page for path in published["paths"])


def test_the_checks_name_what_is_missing_and_what_to_add(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each check fails on an undocumented thing of its kind, saying what to add (so a new
    setting, metric, alert, chart value or option without one fails the suite)."""
    fields = dict(Settings.model_fields)
    fields["lease_ttl_s"] = FieldInfo(annotation=float, default=8.0)
    monkeypatch.setattr(Settings, "model_fields", fields)
    assert settings.undocumented() == [
        "setting DOCPIPE_LEASE_TTL_S has no description: add Field(description=...) to "
        "`lease_ttl_s` in libs/common/src/docpipe/settings/leases.py"
    ]

    monkeypatch.setattr(
        observability_metrics, "REVIEWS_DECIDED", "docpipe_reviews_decided_total", raising=False
    )
    assert metrics.undocumented() == [
        "metric docpipe_reviews_decided_total is named in docpipe/observability/metrics.py "
        "but neither Metrics nor SCRAPED_GAUGES declares it: create it in Metrics.__init__, "
        "or add a ScrapedGauge"
    ]

    parser = argparse.ArgumentParser(prog="docpipe")
    sub = parser.add_subparsers()
    review = sub.add_parser("review", help="the review queue")
    review.add_argument("--edits")
    sub.add_parser("approve")
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    assert cli.undocumented() == [
        "'docpipe review --edits' has no help text: pass help=... to add_argument",
        "command 'docpipe approve' has no help: pass help=... to add_parser",
    ]

    schema = json.loads(chart.schema() and json.dumps(chart.schema()))
    schema["properties"]["api"]["properties"]["reviewQueue"] = {"type": "boolean"}
    monkeypatch.setattr(chart, "schema", lambda: schema)
    assert chart.undocumented() == [
        'chart value api.reviewQueue has no description: add "description" to it in '
        "charts/docpipe/values.schema.json"
    ]

    found = dict(alerts.alerts())
    piling = alerts.Alert("DocpipeReviewsPiling", "vector(1)", "5m", "warning", {})
    found["DocpipeReviewsPiling"] = piling
    monkeypatch.setattr(alerts, "alerts", lambda: found)
    url = "https://docpipe.readthedocs.io/en/latest/operations/runbook/#docpipereviewspiling"
    assert alerts.undocumented() == [
        "alert DocpipeReviewsPiling has no runbook section: add '## DocpipeReviewsPiling' to "
        "docs/operations/runbook.md",
        f"alert DocpipeReviewsPiling has no runbook_url annotation pointing at its section: "
        f"set runbook_url: {url}",
    ]


# Every `## ` section of the README before the docs site existed, and the page it moved to.
OLD_README_SECTIONS = {
    "How it works": "concepts/index.md",
    "Layout": "concepts/index.md#where-the-code-is",
    "Commands": "reference/cli.md",
    "HTTP API": "reference/http-api.md",
    "Documents: formats, limits, OCR": "guides/documents.md",
    "Evidence": "concepts/evidence.md",
    "Review": "guides/reviews.md",
    "Write your own pipeline": "guides/pipelines.md",
    "Upgrade notes": "guides/upgrading.md#010",
    "Configuration": "reference/settings.md",
    "The time-limit rule": "reference/settings.md#the-time-limit-rule",
    "Providers": "guides/providers.md",
    "A real LLM server": "guides/providers.md#a-real-llm-server",
    "Tests": "operations/testing.md",
    "Chaos": "operations/testing.md#chaos",
    "Benchmarks": "operations/benchmarks.md",
    "Images": "guides/deploying.md#images",
    "Kubernetes (kind)": "guides/deploying.md#kubernetes-kind",
    "Tenants and API keys": "guides/tenants.md",
    "Security": "operations/security.md",
    "Bounds": "operations/security.md#bounds",
    "Webhooks": "operations/security.md#webhooks",
    "Outages and timeouts": "operations/security.md#outages-and-timeouts",
    "Smaller doors": "operations/security.md#smaller-doors",
    "Retention": "operations/retention.md",
    "Observability": "operations/observability.md",
    "Metrics": "reference/metrics.md",
    "Dashboards and alerts": "operations/observability.md#dashboards-and-alerts",
    "Tracing": "operations/observability.md#tracing",
}


@pytest.mark.slow  # the site build (make lint builds it too)
def test_every_section_the_readme_had_has_a_page(site: Path) -> None:
    for heading, home in OLD_README_SECTIONS.items():
        page, _, anchor = home.partition("#")
        html = site / page.removesuffix(".md").removesuffix("index") / "index.html"
        assert html.exists(), (heading, home)
        if anchor:
            assert f'id="{anchor}"' in html.read_text(), (heading, home)


def test_the_readme_links_into_the_docs_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links, "the README links into the docs"
    assert [link for link in links if not (ROOT / link).exists()] == []
