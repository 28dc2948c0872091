"""A small HTTP client for docpipe's API (used by the CLI and the benchmarks)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

__all__ = ["DEFAULT_PIPELINE", "ApiError", "DocpipeClient"]

DEFAULT_PIPELINE = "document_extract:v1"


class ApiError(RuntimeError):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class DocpipeClient:
    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 30) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DocpipeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                detail = str(response.json().get("detail"))
            except ValueError:
                detail = response.text[:500]
            raise ApiError(response.status_code, detail)
        return response.json()

    def put_document(self, document_id: str, text: str) -> dict[str, Any]:
        return dict(
            self._call(
                "PUT",
                f"/documents/{document_id}",
                content=text.encode(),
                headers={"Content-Type": "text/plain; charset=utf-8"},
            )
        )

    def put_file(self, document_id: str, data: bytes) -> dict[str, Any]:
        """Upload a PDF or DOCX file (the API tells its format from its bytes)."""
        return dict(
            self._call(
                "PUT",
                f"/documents/{document_id}",
                content=data,
                headers={"Content-Type": "application/octet-stream"},
            )
        )

    def extract(
        self, document_id: str, *, idempotency_key: str | None = None, **options: Any
    ) -> dict[str, Any]:
        """Start a run; the same idempotency key returns the same run."""
        key = idempotency_key or uuid.uuid4().hex
        return dict(
            self._call(
                "POST",
                f"/documents/{document_id}/extract",
                json=options,
                headers={"Idempotency-Key": key},
            )
        )

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/runs/{run_id}"))

    def cancel(self, run_id: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/runs/{run_id}/cancel"))

    def retry(self, run_id: str, from_step: str | None = None) -> dict[str, Any]:
        params = {"from_step": from_step} if from_step else {}
        return dict(self._call("POST", f"/runs/{run_id}/retry", params=params))

    def submit_batch(
        self,
        documents: list[dict[str, str]],
        *,
        idempotency_key: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Submit ``[{"id": ..., "text": ...}]`` to the batch lane."""
        key = idempotency_key or uuid.uuid4().hex
        return dict(
            self._call(
                "POST",
                "/batches",
                json={"documents": documents, **options},
                headers={"Idempotency-Key": key},
            )
        )

    def batch(self, batch_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/batches/{batch_id}"))

    def cancel_batch(self, batch_id: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/batches/{batch_id}/cancel"))

    def pipelines(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/pipelines")["pipelines"])

    def pipeline(self, key: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/pipelines/{key}"))

    def rotate_webhook_secret(self, previous_valid_for_s: float | None = None) -> dict[str, Any]:
        """Create the tenant's webhook signing secret, or rotate it; the answer carries the
        secret, the only time it is shown."""
        params = (
            {} if previous_valid_for_s is None else {"previous_valid_for_s": previous_valid_for_s}
        )
        return dict(self._call("POST", "/webhook-secret", params=params))

    def webhook_secret(self) -> dict[str, Any]:
        return dict(self._call("GET", "/webhook-secret"))
