-- calc_dash_flag_top (stored as dash_flag_top): for each day, every flag of the dash_flag_top_n()
-- most wasteful flagged jobs that ran that day, ranked in the flagged-jobs grid's order (JOB_ORDER
-- in dashboard/queries.py: the same columns, the same directions). The admin's unfiltered grid of
-- any run of days is the top of the union of its days' jobs, exactly: a job among the top n of the
-- period is among the top n of each day it ran in it, with all its flags. (Ranked on the key
-- columns only, then joined to the flags' text: the sort does not carry messages and advice.)
CREATE OR REPLACE MACRO dash_flag_top_n() AS 500;

CREATE OR REPLACE VIEW calc_dash_flag_top AS
WITH top AS (
    SELECT d.day, f.cluster, f.job_id_raw, f.code
    FROM job_day d SEMI JOIN metric_day_scope USING (day)
    JOIN job_flags f USING (cluster, job_id_raw)
    QUALIFY dense_rank() OVER (
        PARTITION BY d.day
        ORDER BY COALESCE(f.wasted_sbu, 0) DESC, f.sbu DESC, f.cluster, f.job_id_raw) <= dash_flag_top_n()
)
SELECT top.day, f.*
FROM top JOIN job_flags f USING (cluster, job_id_raw, code);
