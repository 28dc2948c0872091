-- Named queries of docpipe.state.pages: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

-- name: page_image
-- A page's image, once rendered, or why it could not be (docpipe.state.pages).
SELECT png, width, height, error_kind, error FROM document_page_image
WHERE tenant_id = %(tenant_id)s AND document_id = %(document_id)s AND page = %(page)s;

-- name: page_rotation
-- The degrees a page was turned to be read upright (its image is rendered so).
SELECT rotation FROM document_page
WHERE tenant_id = %(tenant_id)s AND document_id = %(document_id)s AND page = %(page)s;

-- name: store_page_image
-- Keep a page's image; one rendered meanwhile by another request is the same, and stays.
INSERT INTO document_page_image (tenant_id, document_id, page, png, width, height)
VALUES (%(tenant_id)s, %(document_id)s, %(page)s, %(png)s, %(width)s, %(height)s)
ON CONFLICT (tenant_id, document_id, page) DO NOTHING;

-- name: store_page_image_failure
-- Remember that a page could not be drawn, and why; a failure or an image stored meanwhile
-- by another request stays.
INSERT INTO document_page_image (tenant_id, document_id, page, error_kind, error)
VALUES (%(tenant_id)s, %(document_id)s, %(page)s, %(kind)s, %(error)s)
ON CONFLICT (tenant_id, document_id, page) DO NOTHING;

-- name: page_starts
-- Where each page starts in the text of the tenant's documents (text: one page).
SELECT id, coalesce(page_starts, '{0}') AS page_starts FROM document
WHERE tenant_id = %(tenant_id)s AND id = ANY(%(ids)s);

-- name: page_geometries
-- The geometry of the pages asked for, as (document, 0-based page) pairs; pages without one
-- (a DOCX) are left out.
SELECT p.document_id, p.page, p.geometry
FROM unnest(%(document_ids)s::text[], %(pages)s::integer[]) AS wanted (document_id, page)
JOIN document_page p ON p.tenant_id = %(tenant_id)s AND p.document_id = wanted.document_id
                     AND p.page = wanted.page
WHERE p.geometry IS NOT NULL;
