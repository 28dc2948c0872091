"""The HTTP API against real PostgreSQL and Redis, one file a group of routes."""
