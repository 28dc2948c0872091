"""One router per resource."""

from docpipe_api.routes import documents, health, runs

__all__ = ["documents", "health", "runs"]
