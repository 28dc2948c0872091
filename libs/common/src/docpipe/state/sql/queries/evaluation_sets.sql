-- name: create_evaluation_set
-- A new, empty set (version 0); the existing one when the name is taken.
INSERT INTO evaluation_set (id, tenant_id, name, pipeline, step)
VALUES (%(id)s, %(tenant_id)s, %(name)s, %(pipeline)s, %(step)s)
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING id::text, name, pipeline, step, version, items, created_at, updated_at;

-- name: evaluation_set_named
-- One of a tenant's sets, by name.
SELECT id::text, name, pipeline, step, version, items, created_at, updated_at
FROM evaluation_set
WHERE tenant_id = %(tenant_id)s AND name = %(name)s;

-- name: evaluation_set_by_id
-- One of a tenant's sets, by id.
SELECT id::text, name, pipeline, step, version, items, created_at, updated_at
FROM evaluation_set
WHERE tenant_id = %(tenant_id)s AND id = %(id)s::uuid;

-- name: evaluation_sets
-- A tenant's sets, by name.
SELECT id::text, name, pipeline, step, version, items, created_at, updated_at
FROM evaluation_set
WHERE tenant_id = %(tenant_id)s
ORDER BY name
LIMIT %(limit)s;

-- name: open_set_version
-- Start the set's next version (the row stays locked until the transaction ends, so two
-- changes of one set are versions one after the other).
UPDATE evaluation_set SET version = version + 1, updated_at = now()
WHERE id = %(set_id)s AND tenant_id = %(tenant_id)s
RETURNING version;

-- name: put_set_items
-- Add items to the set's version being made: an item of a document the set already holds
-- ends that one's row (removed_in) and takes its place.
WITH new AS (
    SELECT *
    FROM jsonb_to_recordset(%(items)s::jsonb)
         AS i (document_id text, expected jsonb, source text, review_decision_id bigint,
               decided_by text, run_id uuid)
), ended AS (
    UPDATE evaluation_set_item e SET removed_in = %(version)s
    FROM new
    WHERE e.set_id = %(set_id)s AND e.document_id = new.document_id AND e.removed_in IS NULL
      AND e.added_in < %(version)s
)
INSERT INTO evaluation_set_item (set_id, tenant_id, document_id, added_in, expected, source,
                                 review_decision_id, decided_by, run_id)
SELECT %(set_id)s, %(tenant_id)s, document_id, %(version)s, expected, source,
       review_decision_id, decided_by, run_id
FROM new
ON CONFLICT (set_id, document_id, added_in) DO UPDATE
SET expected = excluded.expected, source = excluded.source,
    review_decision_id = excluded.review_decision_id, decided_by = excluded.decided_by,
    run_id = excluded.run_id;

-- name: count_set_items
-- How many items the set holds now, recorded on the set.
UPDATE evaluation_set s
SET items = (SELECT count(*) FROM evaluation_set_item i
             WHERE i.set_id = s.id AND i.removed_in IS NULL)
WHERE s.id = %(set_id)s
RETURNING id::text, name, pipeline, step, version, items, created_at, updated_at;

-- name: set_items
-- The items of one version of a set, by document, a page after `after`.
SELECT document_id, expected, source, decided_by, review_decision_id, run_id::text,
       added_in, created_at
FROM evaluation_set_item
WHERE set_id = %(set_id)s AND added_in <= %(version)s
  AND (removed_in IS NULL OR removed_in > %(version)s)
  AND document_id > %(after)s
ORDER BY document_id
LIMIT %(limit)s;

-- name: missing_set_documents
-- Which of these documents the tenant does not have (at most 10).
SELECT i.id
FROM unnest(%(ids)s::text[]) AS i (id)
WHERE NOT EXISTS (SELECT 1 FROM document d WHERE d.tenant_id = %(tenant_id)s AND d.id = i.id)
LIMIT 10;

-- name: reviewed_output_of_run
-- The output of a step that a person approved (as given or corrected) in a tenant's run,
-- with who decided.
SELECT r.id::text AS run_id, r.document_id, r.pipeline, s.output, rd.id AS review_decision_id,
       rd.reviewer_name AS decided_by
FROM pipeline_run r
JOIN pipeline_step_result s ON s.run_id = r.id AND s.step = %(step)s
JOIN review_decision rd ON rd.id = s.review_decision_id
WHERE r.id = %(run_id)s::uuid AND r.tenant_id = %(tenant_id)s AND s.status = 'done'
  AND rd.action = 'approve';

-- name: reviewed_outputs_of_batch
-- reviewed_output_of_run for every run of a tenant's batch (each document once: its last
-- reviewed run).
SELECT DISTINCT ON (r.document_id)
       r.id::text AS run_id, r.document_id, r.pipeline, s.output,
       rd.id AS review_decision_id, rd.reviewer_name AS decided_by
FROM pipeline_run r
JOIN pipeline_step_result s ON s.run_id = r.id AND s.step = %(step)s
JOIN review_decision rd ON rd.id = s.review_decision_id
WHERE r.batch_id = %(batch_id)s::uuid AND r.tenant_id = %(tenant_id)s AND s.status = 'done'
  AND rd.action = 'approve'
ORDER BY r.document_id, rd.id DESC;
