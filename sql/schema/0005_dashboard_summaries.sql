-- The dashboard's per-day summaries (dash_day, dash_eff_day, dash_flag_day, dash_flag_top) are
-- stored tables kept current by analytics/store.py like the per-job results: a refresh recomputes
-- the days listed in metric_day_scope (the days its jobs ran, before and after). They used to be
-- views re-materialised whole in every published snapshot; those views go.
CREATE TABLE IF NOT EXISTS metric_day_scope (day TIMESTAMP NOT NULL);
DROP MACRO TABLE IF EXISTS dash_src_flag_top;
DROP VIEW IF EXISTS dash_src_job_metrics;
DROP VIEW IF EXISTS dash_src_job_flags;
DROP VIEW IF EXISTS dash_src_flag_day;
DROP VIEW IF EXISTS dash_src_day;
DROP VIEW IF EXISTS dash_src_eff_day;
DROP VIEW IF EXISTS dash_src_job_day;
DROP MACRO IF EXISTS dash_bin;
