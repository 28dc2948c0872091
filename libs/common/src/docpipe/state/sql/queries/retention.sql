-- Named queries of docpipe.state.retention: each block starts with "-- name: <name>" and a
-- line saying what it does. Each returns one row per row it deleted, naming its table
-- (`kind`).
--
-- A batch's rows are picked once, in a MATERIALIZED CTE (`picked`), then deleted by key.
-- Written `WHERE id IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`, the pick may be the
-- inner side of a nested loop, run again for each row of the table: the plan PostgreSQL
-- chooses when the statistics say the table is nearly empty (as autovacuum leaves a quiet
-- one). Each rerun skips the rows the statement has already deleted (locking them again
-- finds them gone) and locks n more, so one statement deleted every row due, not n.

-- name: add_call_log_partitions
-- Weekly partitions of the call log up to `weeks` weeks ahead, those not there yet.
SELECT llm_call_log_add_partitions(%(weeks)s) AS made;

-- name: drop_call_log_partition
-- Drop the oldest weekly partition of the call log whose rows are all older than the
-- retention, keeping the calls of runs not yet ended (llm_call_log_drop_partition); no row
-- when none is that old.
SELECT dropped, kept FROM llm_call_log_drop_partition(now() - make_interval(days => %(days)s));

-- name: prune_call_log
-- Delete up to `limit` provider-call rows of the default partition (weeks that had no
-- partition of their own, and the calls kept when their week's partition went) older than
-- the retention whose run has ended; a run paused for a person has not (a retry it is given
-- re-sends only unfinished calls).
WITH picked AS MATERIALIZED (
    SELECT c.id
    FROM llm_call_log_default c JOIN pipeline_run r ON r.id = c.run_id
    WHERE c.created_at < now() - make_interval(days => %(days)s)
      AND r.status NOT IN ('queued', 'running', 'needs_review')
    ORDER BY c.created_at
    LIMIT %(limit)s
    FOR UPDATE OF c SKIP LOCKED
)
DELETE FROM llm_call_log_default c USING picked p WHERE c.id = p.id
RETURNING 'llm_call_log' AS kind;

-- name: prune_outbox
-- Delete up to `limit` outbox rows published longer ago than the retention.
WITH picked AS MATERIALIZED (
    SELECT id FROM outbox
    WHERE published_at < now() - make_interval(days => %(days)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox o USING picked p WHERE o.id = p.id
RETURNING 'outbox' AS kind;

-- name: prune_runs
-- Delete up to `limit` runs that ended longer ago than the retention, with their steps,
-- decisions and webhook deliveries (ON DELETE CASCADE) and their calls. Never a run that awaits a
-- person, however long it has waited (its document stays too: a run refers to it), nor
-- while a webhook is still owed; runs of a batch only once the batch has ended and sent its
-- own webhook. A document goes with the last run that used it, once it is older than its
-- own retention (`document_days`; 0 keeps documents) and no evaluation set holds it: found
-- from the runs that go, so retention never looks at the documents that stay.
WITH picked AS MATERIALIZED (
    SELECT r.id
    FROM pipeline_run r LEFT JOIN batch b ON b.id = r.batch_id
    WHERE r.status NOT IN ('queued', 'running', 'needs_review')
      AND r.finished_at < now() - make_interval(days => %(days)s)
      AND (r.callback_url IS NULL OR r.notified_at IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM webhook_delivery w
                      WHERE w.run_id = r.id AND w.status = 'pending')
      AND (r.batch_id IS NULL
           OR (b.status <> 'running'
               AND b.finished_at < now() - make_interval(days => %(days)s)
               AND (b.callback_url IS NULL OR b.notified_at IS NOT NULL)))
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
), gone AS (
    DELETE FROM pipeline_run r USING picked p WHERE r.id = p.id
    RETURNING r.id, r.tenant_id, r.document_id, r.created_at, r.finished_at
), last_use AS (
    -- Documents no run but those going uses (a run started on one meanwhile makes the
    -- foreign key refuse the delete: the statement fails and the next pass sees that run).
    SELECT DISTINCT g.tenant_id, g.document_id
    FROM gone g
    WHERE %(document_days)s > 0
      AND NOT EXISTS (SELECT 1 FROM pipeline_run r
                      WHERE r.tenant_id = g.tenant_id AND r.document_id = g.document_id
                        AND r.id NOT IN (SELECT id FROM gone))
      -- nor one an evaluation set holds
      AND NOT EXISTS (SELECT 1 FROM evaluation_set_item i
                      WHERE i.tenant_id = g.tenant_id AND i.document_id = g.document_id
                        AND i.removed_in IS NULL)
), calls AS (
    -- Calls are mostly gone by now, with their week's partition (llm_call_log has no
    -- foreign key): looked up by run in the index of each partition that can hold them, the
    -- weeks from the first of these runs' start to a day past the last one's end (the
    -- partitions outside are never executed). A call is written while its run runs
    -- (check_and_start_calls refuses once it ended); a fallback's row (start_call) by a
    -- step that was already running, which ends within the task's hard time limit (90 s by
    -- default): a day is the margin.
    DELETE FROM llm_call_log
    WHERE run_id = ANY (ARRAY(SELECT id FROM gone))
      AND created_at >= (SELECT min(created_at) FROM gone)
      AND created_at < (SELECT max(finished_at) FROM gone) + interval '1 day'
    RETURNING 1
), documents AS (
    DELETE FROM document d
    USING last_use u
    WHERE d.tenant_id = u.tenant_id AND d.id = u.document_id
      AND d.created_at < now() - make_interval(days => %(document_days)s)
    RETURNING d.id
)
SELECT 'pipeline_run' AS kind FROM gone
UNION ALL
SELECT 'llm_call_log' FROM calls
UNION ALL
SELECT 'document' FROM documents;

-- name: prune_batches
-- Delete up to `limit` ended batches older than the retention whose runs are all gone.
WITH picked AS MATERIALIZED (
    SELECT b.id
    FROM batch b
    WHERE b.status <> 'running'
      AND b.finished_at < now() - make_interval(days => %(days)s)
      AND (b.callback_url IS NULL OR b.notified_at IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM pipeline_run r WHERE r.batch_id = b.id)
      AND NOT EXISTS (SELECT 1 FROM webhook_delivery w
                      WHERE w.batch_id = b.id AND w.status = 'pending')
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM batch b USING picked p WHERE b.id = p.id
RETURNING 'batch' AS kind;

-- name: prune_documents
-- Delete up to `limit` documents stored longer ago than the retention that no run uses:
-- those no run ever used, and those whose last run went while they were younger than
-- their retention (a document normally goes with its last run: prune_runs); never one an
-- evaluation set holds. Oldest first,
-- each looked up in pipeline_run_document_idx, so a pass reads about what it deletes plus
-- the old documents that runs still use.
WITH picked AS MATERIALIZED (
    SELECT d.tenant_id, d.id
    FROM document d
    WHERE d.created_at < now() - make_interval(days => %(days)s)
      AND NOT EXISTS (SELECT 1 FROM pipeline_run r
                      WHERE r.tenant_id = d.tenant_id AND r.document_id = d.id)
      AND NOT EXISTS (SELECT 1 FROM evaluation_set_item i
                      WHERE i.tenant_id = d.tenant_id AND i.document_id = d.id
                        AND i.removed_in IS NULL)
    ORDER BY d.created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM document d USING picked p WHERE d.tenant_id = p.tenant_id AND d.id = p.id
RETURNING 'document' AS kind;

-- name: expire_reviews
-- End up to `limit` runs that have awaited a person longer than `after_s` as 'expired', as
-- a passed deadline ends a run (a person may still retry one), oldest first from
-- pipeline_run_review_since_idx; the webhook of a run that has one says so next (run.ended:
-- notified_at cleared). Every change to a review raises its revision, so a decision made on
-- the page meanwhile is refused as stale. Picked once, as the deletions above are.
WITH picked AS MATERIALIZED (
    SELECT id FROM pipeline_run
    WHERE status = 'needs_review'
      AND review_since < now() - make_interval(secs => %(after_s)s)
    ORDER BY review_since
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pipeline_run r
SET status = 'expired', finished_at = now(), updated_at = now(), notified_at = NULL,
    error = 'the review of ' || r.review_step || ' was not answered within '
            || justify_interval(make_interval(secs => %(after_s)s)),
    review_step = NULL, review_reason = NULL, review_reasons = NULL, review_since = NULL,
    review_revision = r.review_revision + 1
FROM picked p
WHERE r.id = p.id AND r.status = 'needs_review'
RETURNING r.id::text AS run_id, r.pipeline;

-- name: prune_web_sessions
-- Delete up to `limit` web sessions that expired longer ago than `days`, oldest first (from
-- web_session_expires_idx).
WITH picked AS MATERIALIZED (
    SELECT id_sha256 FROM web_session
    WHERE expires_at < now() - make_interval(days => %(days)s)
    ORDER BY expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM web_session s USING picked p WHERE s.id_sha256 = p.id_sha256
RETURNING 'web_session' AS kind;

-- name: prune_answered_requests
-- Delete up to `limit` entries of the answer reuse cache (runs that reuse answers) older
-- than the call log's retention, oldest first (answered_request_created_idx): the call each
-- names is gone, or goes with its week, and is not reused any more.
WITH picked AS MATERIALIZED (
    SELECT tenant_id, request_sha256 FROM answered_request
    WHERE created_at < now() - make_interval(days => %(days)s)
    ORDER BY created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM answered_request a USING picked p
WHERE a.tenant_id = p.tenant_id AND a.request_sha256 = p.request_sha256
RETURNING 'answered_request' AS kind;
