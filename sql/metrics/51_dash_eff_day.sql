-- calc_dash_eff_day (stored as dash_eff_day): what the efficiency histogram filters and counts. Per
-- day, cluster, user, account, partition, first-day mark and the job's 10 % bin of each efficiency,
-- how many jobs (n). The histogram of a period sums n over the rows dash_job_once keeps
-- (sql/views/35_dashboard.sql).

-- The 10 % efficiency bin of a job (0 ... 9, over 100 % in the last); NULL when not measured.
CREATE OR REPLACE MACRO dash_bin(pct) AS
    CASE WHEN pct IS NOT NULL THEN CAST(LEAST(floor(GREATEST(pct, 0) / 10), 9) AS TINYINT) END;

CREATE OR REPLACE VIEW calc_dash_eff_day AS
SELECT day, cluster, "user", account, "partition", is_first,
       dash_bin(cpu_eff_pct) AS cpu_bin, dash_bin(gpu_util_pct) AS gpu_bin,
       dash_bin(mem_eff_pct) AS mem_bin, dash_bin(time_eff_pct) AS time_bin,
       count(*) AS n
FROM job_day SEMI JOIN metric_day_scope USING (day)
GROUP BY ALL;
