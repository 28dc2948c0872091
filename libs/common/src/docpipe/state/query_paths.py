"""Where each named query runs, and which ones are planned afresh on every execution.

Every query in ``sql/queries/`` is in exactly one of three paths (a test holds the lists to
the files, so a new query is placed when it is written):

- ``PERIODIC``: beat's timers (the reaper, the outbox sweep, admission, retention, the
  gauges) and admission after each batch run's end: they run whatever anyone does, so
  their cost must not grow with the history the tables hold.
- ``LISTS``: the reads behind a page or a list (a batch's runs, the review queue, a run's
  steps): each must cost its page, not the tenant's or the batch's size.
- ``KEYED``: one row or one run by its key, per request, step or call.

tests/integration/test_query_plans.py EXPLAINs every one of them on a filled schema and
fails on a sequential scan of pipeline_run, pipeline_step_result or llm_call_log;
``python -m bench.scale`` times them at 100,000 and 1,000,000 runs.

``CUSTOM_PLAN`` names the queries that are never prepared, with the reason: PostgreSQL plans
an unprepared statement with its values (a custom plan) every time. A prepared statement
switches to a generic plan, made for any values, after its fifth execution when that plan
looks no costlier; for a query whose best plan depends on a value (an optional filter
``x IS NULL OR ...``, an age cutoff), the generic plan is a scan of everything.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["CUSTOM_PLAN", "KEYED", "LISTS", "PERIODIC"]

PERIODIC = frozenset(
    {
        # admission: beat's tick and each batch run's end, one at a time
        "admit_batch_runs",
        # the reaper (recover_stalled_work) and the outbox sweep
        "reap_lost_leases",
        "redrive_lost_steps",
        "expire_overdue_runs",
        "abandon_orphaned_steps",
        "lock_due_outbox",
        # batches ending, webhooks queued and re-driven
        "finish_batches",
        "queue_run_webhooks",
        "queue_batch_webhooks",
        "reap_interrupted_webhook_attempts",
        "redrive_lost_webhooks",
        # retention
        "add_call_log_partitions",
        "drop_call_log_partition",
        "prune_call_log",
        "prune_outbox",
        "prune_runs",
        "prune_batches",
        "prune_documents",
        "expire_reviews",
        "prune_web_sessions",
        "prune_answered_requests",
        # the gauges beat exports on every scrape
        "metrics_runs_by_status",
        "metrics_runs_ended_estimate",
        "metrics_backlogs",
        "metrics_review_backlog",
        "metrics_periodic_jobs",
        "metrics_evaluation_accuracy",
        "metrics_provider_batches",
        "metrics_provider_batch_calls",
        # every periodic job's guard
        "start_periodic_job",
        "finish_periodic_job",
        # every `docpipe migrate` (a deploy)
        "active_run_definitions",
        # the provider-batch lane's collector and poller
        "waiting_provider_batch_groups",
        "waiting_provider_batch_calls",
        "pack_provider_batch",
        "open_provider_batches",
        "packed_provider_batch_calls",
        "record_provider_batch_file",
        "record_provider_batch_submitted",
        "record_provider_batch_status",
        "recorded_provider_batch_ids",
        "end_provider_batch",
        "fail_provider_batch_submission",
        "wake_provider_batch_steps",
        "abandoned_provider_batches",
        "switch_waits_near_deadline",
        "drop_waits_of_ended_runs",
    }
)

LISTS = frozenset(
    {
        "batch_runs",
        "batch_runs_of_status",
        "batch_results",
        "batch_progress",
        "list_reviews",
        "list_reviews_sorted",
        "review_queue_counts",
        "list_api_keys",
        "run_status",
        "run_steps",
        "decisions_of_runs",
        "decisions_since",
        "tenant_webhook_secrets",
        "document_active_runs",
        "finished_pages",
        "page_starts",
        "page_geometries",
        # evaluations: a set's items and an evaluation's runs and documents, a page at a
        # time; a tenant's sets and evaluations
        "set_items",
        "evaluation_runs",
        "evaluation_documents",
        "evaluation_sets",
        "evaluations",
        "reviewed_outputs_of_batch",
        # a tenant's runs and batches, and its home page's counts (each stops at a cap)
        "list_runs",
        "list_runs_by_document",
        "list_batches",
        "run_counts",
        "review_backlog",
    }
)

KEYED = frozenset(
    {
        "create_batch",
        "put_documents",
        "missing_documents",
        "create_batch_runs",
        "stop_batch_runs",
        "end_stopped_batch",
        "cancel_pending_steps",
        "check_and_start_calls",
        "start_call",
        "route_call",
        "finish_calls",
        "put_document",
        "get_document",
        "document_text",
        "lock_document",
        "delete_document_runs",
        "delete_document",
        "put_original_chunk",
        "original_chunk",
        "document_for_extraction",
        "original_slice",
        "start_page",
        "finish_page",
        "forget_page",
        "record_extraction",
        "take_outbox_ids",
        "page_image",
        "page_rotation",
        "store_page_image",
        "store_page_image_failure",
        # the web pages' sessions, by the hash of their id
        "start_web_session",
        "web_session_is_live",
        "end_web_session",
        "batch_has_run",
        "lock_review",
        "review_row",
        "review_inputs",
        "review_document",
        "reviewer_name",
        "record_decision",
        "approve_review",
        "reject_review",
        "create_run",
        "enqueue_step",
        "claim_step",
        "step_state",
        "renew_leases",
        "give_up_lease",
        "release_step",
        "record_step_result",
        "fail_run",
        "abandon_step",
        "lock_run_steps",
        "cancel_run",
        "expire_run",
        "restart_run",
        "run_deadline",
        "batch_status",
        "create_api_key",
        "use_api_key",
        "api_key_is_active",
        "revoke_api_key",
        "webhook_secret_lock",
        "retire_webhook_secret",
        "create_webhook_secret",
        "claim_webhook_attempt",
        "webhook_claim_lock",
        "webhook_delivery_state",
        "record_webhook_attempt",
        "park_webhook_attempt",
        # evaluation sets and evaluations
        "create_evaluation_set",
        "evaluation_set_named",
        "evaluation_set_by_id",
        "open_set_version",
        "put_set_items",
        "count_set_items",
        "missing_set_documents",
        "reviewed_output_of_run",
        "create_evaluation",
        "mark_evaluation_runs",
        "evaluation",
        "save_evaluation_documents",
        "save_evaluation_report",
        "evaluation_document",
        # the reuse cache of runs that reuse answers
        "reuse_answer",
        "remember_answer",
        # a call of a provider-batch run waits, and its wait is settled
        "wait_for_provider_batch",
        "settle_provider_batch_wait",
    }
)

_AGE_CUTOFF = (
    "deletes rows older than a cutoff: planned with the cutoff, it walks the age index from "
    "the oldest row; a generic plan guesses a third of the table and scans all of it"
)

CUSTOM_PLAN: Mapping[str, str] = {
    "list_reviews": (
        "five optional filters (x IS NULL OR ...): 32 shapes, each best served by another "
        "index; planned with its values, each shape gets its own plan"
    ),
    "list_reviews_sorted": "the review queue's four optional filters, as list_reviews",
    "review_queue_counts": "the review queue's four optional filters, as list_reviews",
    "list_api_keys": "an optional tenant (x IS NULL OR ...)",
    "list_runs": "five optional filters, as list_reviews (migration 0060 has an index per shape)",
    "list_runs_by_document": "list_runs' filters, beside a prefix of the document id",
    "list_batches": "four optional filters and the needs_review flag, as list_runs",
    "batch_results": (
        "read through a server-side cursor, never prepared: a batch's size decides between "
        "its index and a scan, and a generic plan does not know the batch"
    ),
    "prune_call_log": _AGE_CUTOFF,
    "prune_outbox": _AGE_CUTOFF,
    "prune_runs": _AGE_CUTOFF,
    "prune_batches": _AGE_CUTOFF,
    "prune_documents": _AGE_CUTOFF,
}
