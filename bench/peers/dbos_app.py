"""Peer (c): DBOS, the pipeline as a workflow of three ``@DBOS.step`` s on a DBOS queue.

One process serves the queue with ``worker_concurrency`` workflows at once (DBOS runs them
in threads); its system database is a PostgreSQL database of its own. Each step's output
is checkpointed by DBOS, so a recovered workflow skips finished steps; calls inside a step
are not checkpointed one by one (as each docpipe call is), so a step cut short re-runs all
its calls.

    python -m bench.peers.dbos_app --database-url URL --concurrency C [--polling-s 1.0]
"""

from __future__ import annotations

import argparse
import logging
import threading
from typing import Any

from dbos import DBOS

from bench.peers.pipeline import PIPELINE, run_step
from docpipe.errors import TransientLLMError

APP_NAME = "docpipe-peer"
QUEUE = "pipeline"
WORKFLOW = "pipeline_workflow"


# A transient provider error is retried, as docpipe retries it.
@DBOS.step(
    name="pipeline_step",
    retries_allowed=True,
    max_attempts=6,
    interval_seconds=0.5,
    should_retry=lambda exc: isinstance(exc, TransientLLMError),
)
def pipeline_step(name: str, document: str, outputs: dict[str, Any]) -> dict[str, Any]:
    return run_step(name, document, outputs)


@DBOS.workflow(name=WORKFLOW)
def pipeline_workflow(doc_id: str, document: str) -> str:
    outputs: dict[str, Any] = {}
    for name in PIPELINE.step_names:
        outputs[name] = pipeline_step(name, document, outputs)
    return doc_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--polling-s", type=float, default=1.0)
    parser.add_argument("--executor-id", default="local")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    DBOS(
        config={
            "name": APP_NAME,
            "system_database_url": args.database_url,
            "executor_id": args.executor_id,
            "log_level": "WARNING",
            # Room for every workflow of the queue plus DBOS's own threads.
            "max_executor_threads": max(64, 4 * args.concurrency),
            "sys_db_pool_size": max(20, 2 * args.concurrency),
        }
    )
    DBOS.launch()
    DBOS.register_queue(
        QUEUE, worker_concurrency=args.concurrency, polling_interval_sec=args.polling_s
    )
    print("dbos peer ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
