-- Evidence on the page (issue 25): where each word of a page's text stands, kept with the
-- page's memo, so that a quote's boxes can be drawn over the page; and each page's image,
-- rendered once, when it is first asked for.
ALTER TABLE document_page
    ADD COLUMN geometry jsonb;  -- {"width", "height", "words": [[start, end, l, t, r, b]]}

CREATE TABLE document_page_image (
    tenant_id   text        NOT NULL,
    document_id text        NOT NULL,
    page        integer     NOT NULL,                    -- 0-based
    png         bytea       NOT NULL,
    width       integer     NOT NULL,                    -- pixels
    height      integer     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, document_id, page),
    FOREIGN KEY (tenant_id, document_id) REFERENCES document (tenant_id, id) ON DELETE CASCADE
);
