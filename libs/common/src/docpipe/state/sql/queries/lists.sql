-- Named queries of docpipe.state.lists: a tenant's runs and batches, newest first, and the
-- counts of its home page. Each list is run by Session.search_as (planned with its
-- parameters): the filters left unset fold away and the set ones pick their index of
-- migration 0060; a page is then read from that index in order and stops at its limit.

-- name: list_runs
-- A tenant's runs, newest first, after the cursor (created_at, id), with the filters that
-- are set: a status, a pipeline, a batch, a creation time range (a document id's start:
-- list_runs_by_document).
SELECT r.id::text AS run_id, r.pipeline, r.document_id, r.batch_id::text, r.lane, r.status,
       CASE WHEN r.status IN ('queued', 'running') THEN r.current_step END AS current_step,
       r.steps_done, r.steps_total, r.cost_usd AS cost_so_far_usd, r.error, r.created_at,
       r.finished_at,
       CASE WHEN r.status = 'needs_review' THEN r.review_since END AS waiting_since
FROM pipeline_run r
WHERE r.tenant_id = %(tenant_id)s
  AND (%(status)s::text IS NULL OR r.status = %(status)s)
  AND (%(pipeline)s::text IS NULL OR r.pipeline = %(pipeline)s)
  AND (%(batch_id)s::uuid IS NULL OR r.batch_id = %(batch_id)s)
  AND (%(created_from)s::timestamptz IS NULL OR r.created_at >= %(created_from)s)
  AND (%(created_to)s::timestamptz IS NULL OR r.created_at < %(created_to)s)
  AND (%(after_at)s::timestamptz IS NULL
       OR (r.created_at, r.id) < (%(after_at)s, %(after_id)s::uuid))
ORDER BY r.created_at DESC, r.id DESC
LIMIT %(limit)s;

-- name: list_runs_by_document
-- list_runs of the runs whose document id starts with a prefix (%(document_like)s, a LIKE
-- pattern, escaped), its other filters as there. Which index reads such a page best
-- depends on where the prefix's runs stand in time, which the planner cannot know (it
-- takes them to be spread evenly; the runs of one sender's files come in bursts). So the
-- page is read in one of two ways, each bounded:
-- - recent: the tenant's next %(walk)s runs after the cursor, in time order from
--   pipeline_run_tenant_created_idx, filtered. When %(limit)s of them match, they are the
--   page (any other match is older): a prefix most runs share costs its page.
-- - otherwise the prefix's runs from pipeline_run_document_created_idx, (created_at, id)
--   read from the index alone, the newest %(limit)s kept by a top-N sort: a rare prefix
--   costs its matches' index entries, never a heap row per match.
-- Then the page's runs by id.
WITH recent AS MATERIALIZED (
    SELECT w.id
    FROM (SELECT r.id, r.created_at, r.document_id, r.status, r.pipeline, r.batch_id
          FROM pipeline_run r
          WHERE r.tenant_id = %(tenant_id)s
            AND (%(created_from)s::timestamptz IS NULL OR r.created_at >= %(created_from)s)
            AND (%(created_to)s::timestamptz IS NULL OR r.created_at < %(created_to)s)
            AND (%(after_at)s::timestamptz IS NULL
                 OR (r.created_at, r.id) < (%(after_at)s, %(after_id)s::uuid))
          ORDER BY r.created_at DESC, r.id DESC
          LIMIT %(walk)s) w
    WHERE w.document_id LIKE %(document_like)s
      AND (%(status)s::text IS NULL OR w.status = %(status)s)
      AND (%(pipeline)s::text IS NULL OR w.pipeline = %(pipeline)s)
      AND (%(batch_id)s::uuid IS NULL OR w.batch_id = %(batch_id)s)
    ORDER BY w.created_at DESC, w.id DESC
    LIMIT %(limit)s
), page AS (
    SELECT id FROM recent WHERE (SELECT count(*) FROM recent) = %(limit)s
    UNION ALL
    -- OFFSET 0 has the matches planned on their own, as the cheapest way to read them all
    -- (the prefix's index entries): planned with the ORDER BY and LIMIT, they would be
    -- read by the walk in time order that the first way has just found short. The
    -- condition stays outside, so they are not even begun when the first way found the page.
    (SELECT m.id
     FROM (SELECT r.id, r.created_at
           FROM pipeline_run r
           WHERE r.tenant_id = %(tenant_id)s
             AND r.document_id LIKE %(document_like)s
             AND (%(status)s::text IS NULL OR r.status = %(status)s)
             AND (%(pipeline)s::text IS NULL OR r.pipeline = %(pipeline)s)
             AND (%(batch_id)s::uuid IS NULL OR r.batch_id = %(batch_id)s)
             AND (%(created_from)s::timestamptz IS NULL OR r.created_at >= %(created_from)s)
             AND (%(created_to)s::timestamptz IS NULL OR r.created_at < %(created_to)s)
             AND (%(after_at)s::timestamptz IS NULL
                  OR (r.created_at, r.id) < (%(after_at)s, %(after_id)s::uuid))
           OFFSET 0) m
     WHERE (SELECT count(*) FROM recent) < %(limit)s
     ORDER BY m.created_at DESC, m.id DESC
     LIMIT %(limit)s)
)
SELECT r.id::text AS run_id, r.pipeline, r.document_id, r.batch_id::text, r.lane, r.status,
       CASE WHEN r.status IN ('queued', 'running') THEN r.current_step END AS current_step,
       r.steps_done, r.steps_total, r.cost_usd AS cost_so_far_usd, r.error, r.created_at,
       r.finished_at,
       CASE WHEN r.status = 'needs_review' THEN r.review_since END AS waiting_since
FROM pipeline_run r
WHERE r.id IN (SELECT id FROM page)
ORDER BY r.created_at DESC, r.id DESC;

-- name: list_batches
-- A tenant's batches, newest first, after the cursor (created_at, id), with the filters that
-- are set (a status, a pipeline, a creation time range, only those with runs awaiting a
-- person); each with its runs counted by status (an index-only count over the batch's
-- entries of pipeline_run_batch_idx).
SELECT b.id::text AS batch_id, b.pipeline, b.status, b.runs_total,
       b.cost_usd AS cost_so_far_usd, b.budget_usd, b.created_at, b.finished_at,
       coalesce((SELECT jsonb_object_agg(c.status, c.n)
                 FROM (SELECT r.status, count(*) AS n FROM pipeline_run r
                       WHERE r.batch_id = b.id GROUP BY r.status) c), '{}') AS runs_by_status
FROM batch b
WHERE b.tenant_id = %(tenant_id)s
  AND (%(status)s::text IS NULL OR b.status = %(status)s)
  AND (%(pipeline)s::text IS NULL OR b.pipeline = %(pipeline)s)
  AND (%(created_from)s::timestamptz IS NULL OR b.created_at >= %(created_from)s)
  AND (%(created_to)s::timestamptz IS NULL OR b.created_at < %(created_to)s)
  AND (NOT %(needs_review)s
       OR EXISTS (SELECT FROM pipeline_run r
                  WHERE r.batch_id = b.id AND r.status = 'needs_review'))
  AND (%(after_at)s::timestamptz IS NULL
       OR (b.created_at, b.id) < (%(after_at)s, %(after_id)s::uuid))
ORDER BY b.created_at DESC, b.id DESC
LIMIT %(limit)s;

-- name: run_counts
-- A tenant's runs of each status created since that status' time (%(statuses)s and
-- %(sinces)s side by side), each count stopping at %(cap)s: an index-only scan of at most
-- that many entries per status, so a home page's counts cost the same at any size of
-- history.
SELECT s.status,
       (SELECT count(*) FROM (SELECT FROM pipeline_run r
                              WHERE r.tenant_id = %(tenant_id)s AND r.status = s.status
                                AND r.created_at >= s.since
                              LIMIT %(cap)s) c) AS runs
FROM unnest(%(statuses)s::text[], %(sinces)s::timestamptz[]) AS s (status, since);

-- name: review_backlog
-- A tenant's runs awaiting a person (counted up to %(cap)s) and since when the oldest has
-- waited: both from the review queue's index.
SELECT (SELECT count(*) FROM (SELECT FROM pipeline_run
                              WHERE tenant_id = %(tenant_id)s AND status = 'needs_review'
                              LIMIT %(cap)s) c) AS waiting,
       (SELECT min(review_since) FROM pipeline_run
        WHERE tenant_id = %(tenant_id)s AND status = 'needs_review') AS oldest_since;
