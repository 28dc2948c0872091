-- Pages as they were scanned (issue 26): the degrees each page, as the PDF shows it (its own
-- /Rotate applied), was turned to be read upright, and what extraction noticed as warnings
-- with a kind, a page and a value, beside the sentence that was all there was.
ALTER TABLE document_page
    ADD COLUMN rotation integer NOT NULL DEFAULT 0 CHECK (rotation IN (0, 90, 180, 270)),
    ADD COLUMN warnings jsonb   NOT NULL DEFAULT '[]';

-- The sentences written so far, as the warnings they were ("page 3: low OCR confidence
-- (41.5)", "page 2 is large: rendered at 150 dpi for OCR", "page 4: OCR took longer than
-- 60 s; its text is missing").
CREATE FUNCTION pg_temp.page_warning(message text, page integer) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object(
        'kind', CASE WHEN message LIKE '%low OCR confidence%' THEN 'low_ocr_confidence'
                     WHEN message LIKE '%rendered at%dpi%' THEN 'reduced_resolution'
                     ELSE 'ocr_timeout' END,
        'page', coalesce(substring(message FROM '^page (\d+)')::integer, page),
        'value', CASE WHEN message LIKE '%low OCR confidence%'
                          THEN substring(message FROM '\(([0-9.]+)\)')::float8
                      WHEN message LIKE '%rendered at%dpi%'
                          THEN substring(message FROM 'rendered at (\d+) dpi')::float8
                      ELSE substring(message FROM 'longer than ([0-9.]+) s')::float8 END,
        'message', message)
$$;

UPDATE document_page SET warnings = jsonb_build_array(pg_temp.page_warning(warning, page + 1))
WHERE warning IS NOT NULL;
ALTER TABLE document_page DROP COLUMN warning;

UPDATE document d
SET extraction_warnings = (
    SELECT coalesce(jsonb_agg(CASE WHEN jsonb_typeof(w) = 'string'
                                   THEN pg_temp.page_warning(w #>> '{}', 1) ELSE w END
                              ORDER BY n), '[]'::jsonb)
    FROM jsonb_array_elements(d.extraction_warnings) WITH ORDINALITY AS e (w, n))
WHERE jsonb_typeof(d.extraction_warnings) = 'array'
  AND jsonb_path_exists(d.extraction_warnings, '$[*] ? (@.type() == "string")');
