"""Every name the k8s-tests look up in the installed release: objects, label selectors,
Service ports and data keys.

kube.py and the tests take them from here, and tests/chart/test_chart_k8s_lookups.py renders
the chart and checks each one against the rendered objects, so renaming something in the
chart fails offline instead of first on a cluster. Plain data and pure functions only: that
test loads this file without the kubernetes client.
"""

from __future__ import annotations

from typing import NamedTuple

# The chart names its objects <fullname>-<component>, and <fullname> is the release name
# when that name contains "docpipe".
RELEASE = "docpipe"
# Worker pools (values of the label docpipe.io/pool).
INTERACTIVE = "interactive"
BATCH = "batch"
POOLS = (INTERACTIVE, BATCH)

# Values of the label app.kubernetes.io/component whose pods the tests list.
BEAT = "beat"
WORKER = "worker"
REDIS = "redis"
COMPONENTS = (BEAT, WORKER, REDIS)

BEAT_DEPLOYMENT = f"{RELEASE}-beat"


def worker_deployment(pool: str) -> str:
    return f"{RELEASE}-worker-{pool}"


def pod_selector(component: str, pool: str | None = None) -> str:
    """The label selector of this release's pods of one component (and worker pool)."""
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
    if pool:
        selector += f",docpipe.io/pool={pool}"
    return selector


class ServicePort(NamedTuple):
    """A Service and the port of it that `kubectl port-forward service/<name>` targets."""

    name: str
    port: int


API = ServicePort(f"{RELEASE}-api", 8000)
FAKE_LLM = ServicePort(f"{RELEASE}-fake-llm", 8100)
POSTGRESQL = ServicePort(f"{RELEASE}-postgresql", 5432)
SERVICES = (API, FAKE_LLM, POSTGRESQL)

CONFIGMAP = RELEASE
REAPER_INTERVAL_KEY = "DOCPIPE_REAPER_INTERVAL_S"
SECRET = RELEASE
POSTGRES_PASSWORD_KEY = "postgres-password"
# The bundled PostgreSQL's user and database (values postgresql.username / .database).
DATABASE_USER = "docpipe"
DATABASE_NAME = "docpipe"
