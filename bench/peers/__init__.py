"""The peers docpipe is compared with: the same pipeline on plain Celery and on DBOS."""
