-- Files as big as documents are (issue 26): a PDF's or DOCX's bytes are stored in chunks of
-- at most 1 MiB, written one by one as the upload is read from disk, so neither the API nor
-- PostgreSQL's client buffers hold a whole 50 MB file. document.original keeps the files
-- stored before this migration (nothing is moved: a migration rewriting every file would
-- hold its locks for as long as that takes); it is NULL for later ones.
CREATE TABLE document_original_chunk (
    tenant_id   text    NOT NULL,
    document_id text    NOT NULL,
    seq         integer NOT NULL,                        -- 0, 1, 2 ... in file order
    data        bytea   NOT NULL,
    PRIMARY KEY (tenant_id, document_id, seq),
    FOREIGN KEY (tenant_id, document_id) REFERENCES document (tenant_id, id) ON DELETE CASCADE
);
-- PDFs and zips are compressed already: TOAST stores the chunks without trying again.
ALTER TABLE document_original_chunk ALTER COLUMN data SET STORAGE EXTERNAL;
