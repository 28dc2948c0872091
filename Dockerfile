# docpipe's images, one target each, from one build: the API, the two worker pools, beat and
# the fake provider. They share the venv stages (third-party packages first, so those layers
# survive code changes) and one runtime stage (user, environment).
#
#   docker build --target api -t docpipe-api .          (make images builds all five)
#
# Built from the repository root. BASE_IMAGE is any Debian-based image with python3 >= 3.11
# and its venv module (python:3.12-slim by default). PIP_INDEX_URL optionally names a PyPI
# mirror; a CA bundle for an intercepting HTTPS proxy may be passed as the build secret
# `ca_bundle` (make images does so when one exists); it never lands in a layer.
ARG BASE_IMAGE=python:3.12-slim

# --- venvs: /opt/docpipe with the versions of constraints.txt --------------------------------
FROM ${BASE_IMAGE} AS venv
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/docpipe
COPY constraints.txt scripts/pip-install-dependencies /src/

FROM venv AS library-dependencies
ARG PIP_INDEX_URL
COPY libs/common/pyproject.toml /src/libs/common/
RUN --mount=type=secret,id=ca_bundle \
    /opt/docpipe/bin/python /src/pip-install-dependencies /src/constraints.txt \
        /src/libs/common/pyproject.toml

FROM library-dependencies AS worker-venv
COPY libs/common /src/libs/common
RUN /opt/docpipe/bin/pip install --no-deps --no-build-isolation /src/libs/common \
    && /opt/docpipe/bin/pip uninstall --yes setuptools wheel pip

FROM library-dependencies AS api-venv
ARG PIP_INDEX_URL
COPY services/api/pyproject.toml /src/services/api/
RUN --mount=type=secret,id=ca_bundle \
    /opt/docpipe/bin/python /src/pip-install-dependencies /src/constraints.txt \
        /src/services/api/pyproject.toml
COPY libs/common /src/libs/common
COPY services/api /src/services/api
RUN /opt/docpipe/bin/pip install --no-deps --no-build-isolation /src/libs/common /src/services/api \
    && /opt/docpipe/bin/pip uninstall --yes setuptools wheel pip

# The fake provider does not use the shared library.
FROM venv AS fake-llm-venv
ARG PIP_INDEX_URL
COPY services/fake-llm/pyproject.toml /src/services/fake-llm/
RUN --mount=type=secret,id=ca_bundle \
    /opt/docpipe/bin/python /src/pip-install-dependencies /src/constraints.txt \
        /src/services/fake-llm/pyproject.toml
COPY services/fake-llm /src/services/fake-llm
RUN /opt/docpipe/bin/pip install --no-deps --no-build-isolation /src/services/fake-llm \
    && /opt/docpipe/bin/pip uninstall --yes setuptools wheel pip

# --- runtime: only the venv, without pip; uid/gid 10001; nothing written outside /tmp ------
FROM ${BASE_IMAGE} AS runtime
RUN groupadd --system --gid 10001 docpipe \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin docpipe
ENV PATH=/opt/docpipe/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /tmp
# scripts/build-images passes the library's version (libs/common/pyproject.toml), which every
# image inherits from here; the chart's appVersion is the same (tests/unit/test_version.py).
ARG VERSION=unknown
LABEL org.opencontainers.image.version="${VERSION}"

FROM runtime AS api
COPY --from=api-venv /opt/docpipe /opt/docpipe
LABEL org.opencontainers.image.title="docpipe-api" \
      org.opencontainers.image.description="docpipe HTTP API and the docpipe CLI (migrations)"
EXPOSE 8000
# Exec form: uvicorn is PID 1; on SIGTERM it stops accepting and finishes open requests.
ENTRYPOINT ["uvicorn", "docpipe_api.main:app"]
CMD ["--host", "0.0.0.0", "--port", "8000", "--no-access-log"]

# The worker pools and beat: one venv, one entry point (exec form: `celery` is PID 1 and
# gets SIGTERM itself: warm shutdown, running steps finish, prefetched messages go back to
# the queue). The liveness file must be on a writable mount (an emptyDir in the chart, /tmp
# under `docker run --read-only`). Kubernetes `args` replace CMD.
FROM runtime AS celery
COPY --from=worker-venv /opt/docpipe /opt/docpipe
ENV DOCPIPE_LIVENESS_FILE=/tmp/docpipe-alive
ENTRYPOINT ["celery", "-A", "docpipe.worker.app"]

# Workers read PDFs and DOCX files, and OCR pages without a text layer with Debian's
# Tesseract and its English data (another language: add tesseract-ocr-<lang> here and set
# DOCPIPE_OCR_LANGUAGE). Nothing is downloaded at run time.
FROM celery AS worker
USER root
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        tesseract-ocr tesseract-ocr-eng \
    && rm -rf /var/lib/apt/lists/*
USER 10001:10001

FROM worker AS worker-interactive
LABEL org.opencontainers.image.title="docpipe-worker-interactive" \
      org.opencontainers.image.description="docpipe Celery worker for the interactive lane"
CMD ["worker", "--queues", "llm_interactive,docpipe_periodic,docpipe_webhooks", "--hostname", "interactive@%h", \
     "--concurrency", "4", "--pool", "prefork", "--loglevel", "INFO", "--without-gossip", "--without-mingle"]

FROM worker AS worker-batch
LABEL org.opencontainers.image.title="docpipe-worker-batch" \
      org.opencontainers.image.description="docpipe Celery worker for the batch lane"
CMD ["worker", "--queues", "llm_batch,docpipe_periodic,docpipe_webhooks", "--hostname", "batch@%h", \
     "--concurrency", "4", "--pool", "prefork", "--loglevel", "INFO", "--without-gossip", "--without-mingle"]

# Run exactly one (the chart uses replicas: 1 with strategy Recreate; periodic jobs are also
# guarded in PostgreSQL). The schedule is in memory: no celerybeat-schedule file.
FROM celery AS beat
LABEL org.opencontainers.image.title="docpipe-beat" \
      org.opencontainers.image.description="docpipe's single Celery beat (recovery, outbox sweep)"
CMD ["beat", "--loglevel", "INFO"]

# For kind, demos and chaos tests, never production.
FROM runtime AS fake-llm
COPY --from=fake-llm-venv /opt/docpipe /opt/docpipe
LABEL org.opencontainers.image.title="docpipe-fake-llm" \
      org.opencontainers.image.description="OpenAI-compatible fake provider with rate limits and fault injection"
EXPOSE 8100
# Exec form: python (serving uvicorn in-process) is PID 1 and gets SIGTERM.
ENTRYPOINT ["python", "-m", "docpipe_fake_llm"]
CMD ["--host", "0.0.0.0", "--port", "8100", "--latency-ms", "300:1500", "--rpm", "600"]
