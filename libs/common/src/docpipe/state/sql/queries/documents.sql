-- Named queries of docpipe.state.documents: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

-- name: put_document
-- Store a document once; an existing id keeps its content (the caller compares hashes). A PDF
-- or DOCX keeps its bytes in document_original_chunk; its content is written by extraction.
WITH inserted AS (
    INSERT INTO document (tenant_id, id, content, content_sha256, size_bytes, format)
    VALUES (%(tenant_id)s, %(id)s, %(content)s, %(sha256)s, %(size_bytes)s, %(format)s)
    ON CONFLICT (tenant_id, id) DO NOTHING
    RETURNING id, content_sha256 AS sha256, true AS created
)
SELECT * FROM inserted
UNION ALL
SELECT id, content_sha256, false AS created
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s AND NOT EXISTS (SELECT 1 FROM inserted);

-- name: get_document
-- A document's metadata, with what extraction found (a text document needs none).
SELECT id, content_sha256 AS sha256, size_bytes, created_at, false AS created, format,
       (format = 'text' OR extracted_at IS NOT NULL) AS extracted,
       CASE WHEN format = 'text' THEN 1 ELSE cardinality(page_starts) END AS pages,
       CASE WHEN format = 'text' THEN 0 ELSE ocr_pages END AS ocr_pages,
       CASE WHEN format = 'text' THEN '[]'::jsonb ELSE extraction_warnings END AS warnings,
       CASE WHEN extracted_at IS NOT NULL THEN (
           SELECT coalesce(jsonb_agg(jsonb_build_object('page', p.page + 1, 'degrees', p.rotation)
                                     ORDER BY p.page), '[]'::jsonb)
           FROM document_page p
           WHERE p.tenant_id = document.tenant_id AND p.document_id = document.id
             AND p.rotation <> 0)
       WHEN format = 'text' THEN '[]'::jsonb END AS rotated_pages
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s;

-- name: document_text
-- A document's text and page map, once known.
SELECT format, content, (format = 'text' OR extracted_at IS NOT NULL) AS extracted,
       coalesce(page_starts, '{0}') AS page_starts
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s;

-- name: lock_document
-- Lock a document to delete it: a run being started on it waits (its KEY SHARE) until then.
SELECT id FROM document WHERE tenant_id = %(tenant_id)s AND id = %(id)s FOR UPDATE;

-- name: document_active_runs
-- A few of the runs not yet ended that use a document (read after lock_document).
SELECT id::text FROM pipeline_run
WHERE tenant_id = %(tenant_id)s AND document_id = %(id)s AND status IN ('queued', 'running')
ORDER BY created_at
LIMIT %(limit)s;

-- name: delete_document_runs
-- Delete a document's ended runs, with their steps and webhook deliveries (ON DELETE
-- CASCADE) and their calls (each partition's run index: llm_call_log has no foreign key):
-- their outputs are the document's content in another form.
WITH gone AS (
    DELETE FROM pipeline_run
    WHERE tenant_id = %(tenant_id)s AND document_id = %(id)s
      AND status NOT IN ('queued', 'running')
    RETURNING id
)
DELETE FROM llm_call_log
WHERE run_id = ANY (ARRAY(SELECT id FROM gone));

-- name: delete_document
-- Delete a document (after delete_document_runs).
DELETE FROM document WHERE tenant_id = %(tenant_id)s AND id = %(id)s;

-- name: put_original_chunk
-- One chunk of a file's bytes, in the transaction that stored its document.
INSERT INTO document_original_chunk (tenant_id, document_id, seq, data)
VALUES (%(tenant_id)s, %(document_id)s, %(seq)s, %(data)s);

-- name: original_chunk
-- One chunk of a file's bytes (none past the last).
SELECT data FROM document_original_chunk
WHERE tenant_id = %(tenant_id)s AND document_id = %(document_id)s AND seq = %(seq)s;

-- name: document_for_extraction
-- What the extract_text step reads: the format (its bytes are read apart: original_chunk),
-- and the step's output once the text is known (as create_run records it then).
SELECT format, known_text_summary(document) AS known_summary
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s;

-- name: original_slice
-- A slice of a file stored whole before migration 0020 (1-based start), so that a process
-- never holds the whole file.
SELECT substring(original FROM %(start)s FOR %(length)s) AS bytes
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s;

-- name: start_page
-- Put a page on record before it is read (as a provider call is before it is sent): a
-- page already read returns nothing; a page started before (a killed worker) counts again.
INSERT INTO document_page AS p (tenant_id, document_id, page)
VALUES (%(tenant_id)s, %(document_id)s, %(page)s)
ON CONFLICT (tenant_id, document_id, page) DO UPDATE
SET attempts = p.attempts + 1, started_at = now()
WHERE p.finished_at IS NULL
RETURNING attempts;

-- name: finish_page
-- Record what a page gave; the memo that later attempts and other runs read.
UPDATE document_page
SET text = %(text)s, ocr = %(ocr)s, confidence = %(confidence)s, warnings = %(warnings)s,
    rotation = %(rotation)s, text_layer_score = %(text_layer_score)s, geometry = %(geometry)s,
    seconds = %(seconds)s, finished_at = now()
WHERE tenant_id = %(tenant_id)s AND document_id = %(document_id)s AND page = %(page)s
  AND finished_at IS NULL;

-- name: forget_page
-- Take a started page off record: it cannot be read, ever (its document fails as
-- unreadable), so it is not left looking like a page whose worker died.
DELETE FROM document_page
WHERE tenant_id = %(tenant_id)s AND document_id = %(document_id)s AND page = %(page)s
  AND finished_at IS NULL;

-- name: finished_pages
-- The pages of a document read so far, in order.
SELECT page, text, ocr, confidence, warnings, rotation
FROM document_page
WHERE tenant_id = %(tenant_id)s AND document_id = %(document_id)s AND finished_at IS NOT NULL
ORDER BY page;

-- name: record_extraction
-- Write the extracted text and page map onto the document, once: a document never changes
-- after, so every run reads the same text (a concurrent run's identical write matches no row).
UPDATE document
SET content = %(content)s, page_starts = %(page_starts)s, ocr_pages = %(ocr_pages)s,
    extraction_warnings = %(warnings)s, extracted_at = now()
WHERE tenant_id = %(tenant_id)s AND id = %(id)s AND extracted_at IS NULL AND format <> 'text';
