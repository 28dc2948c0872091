-- Images are documents (issue 35): a PNG, JPEG or TIFF upload keeps its bytes as a PDF does
-- and is read by OCR, page by page. The new CHECK allows more than the old, so it is added
-- NOT VALID (no scan of the table under its ACCESS EXCLUSIVE lock) and validated after,
-- which reads the rows under a lock that lets writers go on.
ALTER TABLE document
    DROP CONSTRAINT document_format_check,
    ADD CONSTRAINT document_format_check
        CHECK (format IN ('text', 'pdf', 'docx', 'png', 'jpeg', 'tiff')) NOT VALID;
ALTER TABLE document VALIDATE CONSTRAINT document_format_check;
