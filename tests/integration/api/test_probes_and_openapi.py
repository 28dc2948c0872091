"""The probes and the OpenAPI document: every route listed with the errors it may answer."""

from __future__ import annotations

from fastapi.testclient import TestClient

import docpipe


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "version": docpipe.__version__}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    # Redis is not asked: see test_outages.py for readiness while it is down.
    assert ready.json() == {"status": "ready", "checks": {"postgres": "ok"}}


def test_the_openapi_document_lists_every_route_and_its_errors(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    paths = document["paths"]
    expected = {
        ("put", "/documents/{document_id}"): {"201", "200", "409", "413", "415", "422"},
        ("post", "/documents"): {"201", "413", "415", "422"},
        ("get", "/documents/{document_id}"): {"200", "404"},
        ("get", "/documents/{document_id}/pages/{page}"): {"200", "404", "409", "422"},
        ("delete", "/documents/{document_id}"): {"204", "404", "409"},
        ("post", "/documents/{document_id}/extract"): {
            "202",
            "403",
            "404",
            "409",
            "413",
            "415",
            "422",
        },
        ("get", "/runs"): {"200", "422"},
        ("get", "/runs/{run_id}"): {"200", "404"},
        ("post", "/runs/{run_id}/cancel"): {"200", "404", "409"},
        ("post", "/runs/{run_id}/retry"): {"202", "404", "409", "422"},
        ("get", "/runs/{run_id}/events"): {"200", "404"},
        ("post", "/runs/{run_id}/review"): {"200", "404", "409", "413", "415", "422"},
        ("get", "/reviews"): {"200", "422"},
        ("get", "/reviews/{run_id}"): {"200", "404", "409", "422"},
        ("get", "/documents/{document_id}/text"): {"200", "404", "409", "422"},
        ("post", "/batches"): {"202", "403", "404", "409", "413", "415", "422"},
        ("get", "/batches"): {"200", "422"},
        ("get", "/batches/{batch_id}"): {"200", "404"},
        ("get", "/batches/{batch_id}/runs"): {"200", "404", "422"},
        ("get", "/batches/{batch_id}/results"): {"200", "404", "409", "422", "503"},
        ("post", "/batches/{batch_id}/cancel"): {"200", "404", "409"},
        ("get", "/dashboard"): {"200"},
        ("get", "/pipelines"): {"200"},
        ("get", "/pipelines/{key}"): {"200", "404"},
        ("post", "/webhook-secret"): {"201", "409", "422"},
        ("get", "/webhook-secret"): {"200", "404"},
        ("get", "/evaluation-sets"): {"200", "422"},
        ("post", "/evaluation-sets"): {"201", "409", "415", "422"},
        ("get", "/evaluation-sets/{set_ref}"): {"200", "404", "422"},
        ("get", "/evaluation-sets/{set_ref}/items"): {"200", "404", "422"},
        ("post", "/evaluation-sets/{set_ref}/items"): {"200", "404", "409", "413", "415", "422"},
        ("post", "/evaluation-sets/{set_ref}/promote"): {"200", "404", "409", "415", "422"},
        ("post", "/evaluations"): {"202", "404", "409", "415", "422", "503"},
        ("get", "/evaluations"): {"200", "422"},
        ("get", "/evaluations/compare"): {"200", "404", "409", "422"},
        ("get", "/evaluations/{evaluation_id}"): {"200", "404", "422"},
        ("get", "/evaluations/{evaluation_id}/documents"): {"200", "404", "409", "422"},
        ("get", "/evaluations/{evaluation_id}/documents/{document_id}"): {
            "200",
            "404",
            "409",
            "422",
        },
        ("post", "/evaluations/{evaluation_id}/cancel"): {"200", "404", "409", "422", "503"},
        ("get", "/healthz"): {"200"},
        ("get", "/readyz"): {"200", "503"},
    }
    listed = {(method, path) for path, ops in paths.items() for method in ops}
    assert listed == set(expected)
    for (method, path), codes in expected.items():
        responses = paths[path][method]["responses"]
        assert codes <= set(responses), (method, path, set(responses))
        for code in codes - {"200", "201", "202", "204"}:
            if path != "/readyz":
                schema = responses[code]["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorOut"}, (path, code)
    # Every error, validation included, has the one ErrorOut shape.
    assert "HTTPValidationError" not in document["components"]["schemas"]
    assert "requestBody" in paths["/documents/{document_id}"]["put"]
    extract_body = paths["/documents/{document_id}/extract"]["post"]["requestBody"]
    assert extract_body["content"]["application/json"]["schema"]["additionalProperties"] is False
