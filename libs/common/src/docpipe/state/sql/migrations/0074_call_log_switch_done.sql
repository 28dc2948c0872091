-- The steps of migration 0073 are done: their functions go.
DROP FUNCTION llm_call_log_switch_prepare();
DROP FUNCTION llm_call_log_switch_validate();
DROP FUNCTION llm_call_log_switch();
DROP FUNCTION llm_call_log_cutover();
