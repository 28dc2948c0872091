"""Word files read from their XML: the package and its parts (:mod:`.package`), the text of
each story (:mod:`.story`), list labels (:mod:`.numbering`) and equations (:mod:`.omml`).
:class:`docpipe.extraction.docx_reader.DocxReader` puts them together into pages."""
