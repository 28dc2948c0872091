-- A worker reads a document's uploaded bytes in slices (issue 26: its memory must not grow
-- with the file). Uncompressed out-of-line storage lets a slice read only the chunks it
-- covers; PDFs and DOCX files are compressed containers already, so nothing is lost. Rows
-- stored before keep their compression (slices still work, reading from the start).
ALTER TABLE document ALTER COLUMN original SET STORAGE EXTERNAL;
