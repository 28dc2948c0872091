"""Evaluations: how much one upload of expected outputs may hold."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["EvaluationSettings"]


class EvaluationSettings(BaseModel):
    """Evaluations"""

    # An upload is read line by line into a temporary file as it arrives, then stored in
    # chunks in one transaction: the API holds a chunk, never the whole upload.
    max_evaluation_upload_bytes: int = Field(
        default=256_000_000,
        ge=1,
        description=(
            "body of `POST /evaluation-sets/{set}/items` (JSON lines), counted as it arrives "
            "(more: 413)"
        ),
    )
    max_evaluation_items: int = Field(
        default=50_000,
        ge=1,
        description="items one evaluation set may hold, and one upload may add (more: 422)",
    )
    max_expected_output_bytes: int = Field(
        default=1_000_000,
        ge=1,
        description="one item's expected output, as JSON (more: 422 naming the line)",
    )
