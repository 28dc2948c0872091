"""The API serves its metrics on a port of its own, never on the public one."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi.testclient import TestClient

from docpipe_dev.localstack import free_port
from tests.observability.scrape import scrape, total


def test_the_api_serves_metrics_on_its_metrics_port_only(
    make_api_client: Callable[..., TestClient],
) -> None:
    port = free_port()
    client = make_api_client(metrics_port=port, metrics_host="127.0.0.1")

    def not_found() -> float:  # counted since this process started (the test's, here)
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
        return total(
            samples,
            "docpipe_http_request_duration_seconds_count",
            route="/documents/{document_id}",
            status_code="404",
        )

    before = not_found()
    assert client.get("/documents/missing").status_code == 404
    assert client.get("/metrics").status_code == 404  # the public port has no /metrics
    assert not_found() == before + 1


def test_the_web_pages_are_counted_by_their_own_route(
    make_api_client: Callable[..., TestClient],
) -> None:
    port = free_port()
    client = make_api_client(metrics_port=port, metrics_host="127.0.0.1")

    def count(route: str) -> float:
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
        return total(samples, "docpipe_http_request_duration_seconds_count", route=route)

    pages, api = count("/ui/runs/{run_id}"), count("/runs/{run_id}")
    assert client.get("/ui/runs/00000000-0000-0000-0000-000000000000").status_code == 404
    assert (count("/ui/runs/{run_id}"), count("/runs/{run_id}")) == (pages + 1, api)


def test_the_metrics_server_stops_with_the_api(make_api_client: Callable[..., TestClient]) -> None:
    port = free_port()
    client = make_api_client(metrics_port=port, metrics_host="127.0.0.1")
    assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200
    client.__exit__(None, None, None)  # the app's lifespan ends
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
