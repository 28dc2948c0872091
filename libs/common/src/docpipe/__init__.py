"""docpipe: durable LLM document pipelines on Celery, Redis and PostgreSQL."""
