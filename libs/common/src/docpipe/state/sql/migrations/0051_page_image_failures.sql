-- A page that could not be drawn is remembered like one that was (issue 33): asked again,
-- its failure is answered at once instead of rendering it again (a hostile page can take
-- minutes); documents never change, so neither does the answer.
ALTER TABLE document_page_image
    ALTER COLUMN png DROP NOT NULL,
    ALTER COLUMN width DROP NOT NULL,
    ALTER COLUMN height DROP NOT NULL,
    ADD COLUMN error_kind text,
    ADD COLUMN error text,
    ADD CONSTRAINT document_page_image_drawn_or_failed
        CHECK ((png IS NOT NULL AND width IS NOT NULL AND height IS NOT NULL AND error IS NULL)
               OR (png IS NULL AND error IS NOT NULL AND error_kind IS NOT NULL));
