-- A document whose text is known when its run is created (a text document, or a file
-- extracted for an earlier run) has its extract_text step done by create_run and
-- create_batch_runs (issue 27): it costs no message, claim or publish. This is that step's
-- output, the same docpipe.worker.text_extraction gives for such a document (NULL while a
-- file's text is not yet extracted).
CREATE FUNCTION known_text_summary(format text, content text, page_starts integer[],
                                   ocr_pages integer, warnings jsonb, extracted_at timestamptz)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN format = 'text' OR extracted_at IS NOT NULL THEN
        jsonb_build_object('format', format, 'pages', cardinality(coalesce(page_starts, '{0}')),
                           'ocr_pages', coalesce(ocr_pages, 0),
                           'characters', char_length(content), 'ocr_confidence', NULL,
                           'warnings', coalesce(warnings, '[]'::jsonb))
    END
$$;
