-- Documents as people have them (issue 19): PDF and DOCX uploads keep their original bytes;
-- a first step, extract_text, writes their text and page map beside them, once. Text
-- documents need no extraction: their page map is (0,), read as such while it is NULL.
ALTER TABLE document
    ADD COLUMN format              text    NOT NULL DEFAULT 'text'
        CHECK (format IN ('text', 'pdf', 'docx')),
    ADD COLUMN original            bytea,        -- the uploaded file; NULL for text
    ADD COLUMN page_starts         integer[],    -- offset in content where each page starts
    ADD COLUMN ocr_pages           integer,      -- pages read by OCR (no text layer)
    ADD COLUMN extraction_warnings jsonb,
    ADD COLUMN extracted_at        timestamptz;  -- content holds the extracted text since

-- Text extraction memoised per page, like provider calls: a worker killed on page 31 of a
-- 40-page scan resumes at page 31. Keyed by document (not run): extraction depends on the
-- bytes alone, so every run of a document shares its pages.
CREATE TABLE document_page (
    tenant_id   text        NOT NULL,
    document_id text        NOT NULL,
    page        integer     NOT NULL,                    -- 0-based
    attempts    integer     NOT NULL DEFAULT 1,          -- times it was started
    text        text,                                    -- NULL while it is being read
    ocr         boolean,                                 -- read by Tesseract (no text layer)
    confidence  real,                                    -- Tesseract's mean word confidence
    warning     text,                                    -- what went wrong on this page
    seconds     real,                                    -- time its reading took
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,                             -- read: the memo later attempts use
    PRIMARY KEY (tenant_id, document_id, page),
    FOREIGN KEY (tenant_id, document_id) REFERENCES document (tenant_id, id) ON DELETE CASCADE
);
