"""docpipe's HTTP API: thin FastAPI routes over the ``docpipe`` library.

Serve it with ``uvicorn docpipe_api.main:app``; build a configured app with
``docpipe_api.main.create_app(settings)``.
"""
