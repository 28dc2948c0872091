-- docpipe: no-transaction
-- The provider call log becomes partitioned by week, on a live table of any size without a
-- long lock (functions of 0072; docs/operations/retention.md tells the story):
-- a cutover bound at least a week ahead that every row must stay below (brief locks), a
-- check of every row against it (a scan that lets reads and writes go on), then one short
-- transaction in which the table becomes the partition of the time before the bound. Each
-- step is idempotent; a failure leaves the table as it was and working: run docpipe
-- migrate again (before the bound, which each run moves on).
SELECT llm_call_log_switch_prepare();
SELECT llm_call_log_switch_validate();
SELECT llm_call_log_switch();
SELECT llm_call_log_add_partitions(2);
