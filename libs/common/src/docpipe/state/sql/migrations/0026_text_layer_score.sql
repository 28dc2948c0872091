-- PDFs as people make them (issue 26): a page's text layer is judged before it is taken; the
-- measure is kept with the decision (ocr), so a page OCRed over a garbage layer says why.
ALTER TABLE document_page
    ADD COLUMN text_layer_score real;  -- share (0-1) of its characters in real words; NULL: no layer
