-- Named queries of docpipe.state.review_queue: the review queue as a reviewer works through
-- it. Each block starts with "-- name: <name>" and a line saying what it does.

-- name: list_reviews_sorted
-- A tenant's runs awaiting a person, with the filters that are set, by pipeline or by kind
-- of reason (%(order)s), oldest first within each: the %(scan)s oldest waiting runs are read
-- from the review queue's index and sorted, so a page costs the same however long the queue.
SELECT q.* FROM (
    SELECT r.id::text AS run_id, r.pipeline, r.document_id, r.batch_id::text,
           r.review_step AS step, r.review_reason AS reason,
           coalesce(r.review_reasons, '[]'::jsonb) AS reasons, r.review_revision AS revision,
           r.review_since AS waiting_since, r.error
    FROM pipeline_run r
    WHERE r.tenant_id = %(tenant_id)s AND r.status = 'needs_review'
      AND (%(pipeline)s::text IS NULL OR r.pipeline = %(pipeline)s)
      AND (%(step)s::text IS NULL OR r.review_step = %(step)s)
      AND (%(reason)s::text IS NULL OR r.review_reason = %(reason)s)
      AND (%(batch_id)s::uuid IS NULL OR r.batch_id = %(batch_id)s)
    ORDER BY r.review_since, r.id
    LIMIT %(scan)s
) q
ORDER BY CASE WHEN %(order)s::text = 'pipeline' THEN q.pipeline ELSE q.reason END,
         q.waiting_since, q.run_id
LIMIT %(limit)s;

-- name: review_queue_counts
-- How many of a tenant's runs await a person, with the filters that are set, by pipeline and
-- kind of reason, and since when the oldest of each waits: the %(cap)s oldest are counted,
-- read from the review queue's index.
SELECT q.pipeline, q.reason, count(*) AS runs, min(q.waiting_since) AS oldest_since
FROM (
    SELECT r.pipeline, r.review_reason AS reason, r.review_since AS waiting_since
    FROM pipeline_run r
    WHERE r.tenant_id = %(tenant_id)s AND r.status = 'needs_review'
      AND (%(pipeline)s::text IS NULL OR r.pipeline = %(pipeline)s)
      AND (%(step)s::text IS NULL OR r.review_step = %(step)s)
      AND (%(reason)s::text IS NULL OR r.review_reason = %(reason)s)
      AND (%(batch_id)s::uuid IS NULL OR r.batch_id = %(batch_id)s)
    ORDER BY r.review_since, r.id
    LIMIT %(cap)s
) q
GROUP BY q.pipeline, q.reason
ORDER BY q.pipeline, q.reason;
