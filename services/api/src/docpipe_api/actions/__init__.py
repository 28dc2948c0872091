"""What a caller can do to docpipe, each written once for both doors: the HTTP routes
(docpipe_api.routes) and the web pages (docpipe_api.ui.routes) are thin translators of a
request into one of these calls and of its answer (or error) into theirs.

Every action takes its arguments by keyword, starting with the process' ``resources`` and
the ``caller`` (docpipe_api.resources), so a page can never pass a step where a key id
goes. Actions raise docpipe's own errors (docpipe.errors), which docpipe_api.errors maps
to an HTTP status once, for the API's JSON and the pages' error pages alike; a route or a
page never calls another route or page. After a commit an action hands what its
transaction wrote to docpipe.state.after_commit, as the worker's tasks do.

To add an action: a keyword-only function in the module of its resource, exported here;
then the route (and the page, if a person does it too) that calls it.
"""

from docpipe_api.actions.batches import batch_runs, batch_status, cancel_batch, submit_batch
from docpipe_api.actions.documents import read_document, read_page_image, start_extraction
from docpipe_api.actions.evaluations import (
    add_evaluation_set_items,
    cancel_evaluation,
    compare_evaluations,
    create_evaluation_set,
    evaluation_document,
    evaluation_documents,
    evaluation_set,
    evaluation_set_items,
    evaluation_sets,
    evaluation_status,
    evaluations_list,
    promote_reviews,
    start_evaluation,
)
from docpipe_api.actions.lists import dashboard, list_batches, list_runs
from docpipe_api.actions.results import export_batch_results
from docpipe_api.actions.reviews import (
    decide_review,
    list_reviews,
    next_review,
    review_counts,
    review_detail,
)
from docpipe_api.actions.runs import cancel_run, retry_run, run_events, run_status, runs_status

__all__ = [
    "add_evaluation_set_items",
    "batch_runs",
    "batch_status",
    "cancel_batch",
    "cancel_evaluation",
    "cancel_run",
    "compare_evaluations",
    "create_evaluation_set",
    "dashboard",
    "decide_review",
    "evaluation_document",
    "evaluation_documents",
    "evaluation_set",
    "evaluation_set_items",
    "evaluation_sets",
    "evaluation_status",
    "evaluations_list",
    "export_batch_results",
    "list_batches",
    "list_reviews",
    "list_runs",
    "next_review",
    "promote_reviews",
    "read_document",
    "read_page_image",
    "retry_run",
    "review_counts",
    "review_detail",
    "run_events",
    "run_status",
    "runs_status",
    "start_evaluation",
    "start_extraction",
    "submit_batch",
]
