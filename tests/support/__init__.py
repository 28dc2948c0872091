"""What the tests share besides fixtures (tests/conftest.py): builders of test data
(:mod:`.factories`), the fake provider as a process (:mod:`.fakellm`), docpipe's real
processes as fixtures (:mod:`.processes`, a pytest plugin), throwaway servers and databases
(:mod:`.servers`), webhook receivers (:mod:`.receivers`), document files made here
(:mod:`.document_files`; Word files are docpipe_dev.word_xml's), a pipeline for the
routing tests (:mod:`.routing_pipeline`) and schemathesis' hooks
(:mod:`.schemathesis_hooks`)."""
