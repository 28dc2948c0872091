-- A document whose text is known when its run is created (a text document, or a file
-- extracted for an earlier run) has its extract_text step done by create_run and
-- create_batch_runs (issue 27): it costs no message, claim or publish. This is that step's
-- output, the same docpipe.worker.text_extraction gives for such a document (NULL while a
-- file's text is not yet extracted).
CREATE FUNCTION known_text_summary(d document) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN d.format = 'text' OR d.extracted_at IS NOT NULL THEN
        jsonb_build_object('format', d.format,
                           'pages', cardinality(coalesce(d.page_starts, '{0}')),
                           'ocr_pages', coalesce(d.ocr_pages, 0),
                           'characters', char_length(d.content), 'ocr_confidence', NULL,
                           'warnings', coalesce(d.extraction_warnings, '[]'::jsonb),
                           'rotated_pages',
                           (SELECT coalesce(jsonb_agg(jsonb_build_object('page', p.page + 1,
                                                                         'degrees', p.rotation)
                                                      ORDER BY p.page), '[]'::jsonb)
                            FROM document_page p
                            WHERE p.tenant_id = d.tenant_id AND p.document_id = d.id
                              AND p.rotation <> 0))
    END
$$;
