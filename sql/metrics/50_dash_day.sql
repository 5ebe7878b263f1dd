-- The per-day summaries (the files 5N_dash_*.sql) that the dashboard (analytics/queries/summaries.py),
-- `jobsight usage` (usage_summary) and the budgets (budget_status) add up, each
-- computed for the days listed in metric_day_scope: a refresh recomputes the days its jobs ran in,
-- before and after the change. Days are job_day's (30_job_day.sql): a job's SBU, wasted SBU and
-- hours are split across the days it ran exactly as the weekly reports (sql/views/50_report.sql)
-- and `jobsight usage` split them. A job counts in a period when it has a job_day row in it, once
-- however many days of the period it ran; a flagged job is one of those with a row in job_flags.
--
-- Counting distinct jobs over any run of days without a per-job scan: the jobs that ran in
-- [since, until] are those whose first day (job_day.is_first) is in it, plus those already running
-- on `since`; so per day it is enough to keep jobs starting that day (*_first) and jobs running that
-- day (*_running), and take the running count on the period's first day and the starting count on
-- the others (dash_jobs_in_period, sql/views/35_dashboard.sql).

-- The job_day rows of the days in scope, with whether the job has a flag and the day's share of
-- what its advice would have saved (day_savings, 46_job_savings.sql).
CREATE OR REPLACE VIEW calc_dash_job_day AS
SELECT d.*, f.cluster IS NOT NULL AS flagged,
       day_savings(s.cluster IS NOT NULL, s.savings_sbu, d.fraction) AS savings_sbu
FROM job_day d SEMI JOIN metric_day_scope USING (day)
LEFT JOIN (SELECT DISTINCT cluster, job_id_raw FROM job_flags
           WHERE last_day >= (SELECT min(day) FROM metric_day_scope)) f USING (cluster, job_id_raw)
LEFT JOIN (SELECT cluster, job_id_raw, savings_sbu FROM job_savings
           WHERE last_day >= (SELECT min(day) FROM metric_day_scope)) s USING (cluster, job_id_raw);

-- calc_dash_day (stored as dash_day): per day, cluster, user, account and partition, the sums the
-- overview, the users and projects tables, the usage chart and the weekly reports add up over a
-- period, and the per-day job counts. Efficiencies are allocation-weighted means: each job weighs
-- what it held of the resource the efficiency measures (CPU by core-hours, GPU by GPU-hours, memory
-- by GiB-hours, time by SBU, as the time limit reserves the whole charge); *_x_w is the sum of
-- efficiency x weight, *_w the weight of the jobs whose efficiency is known, so that a job whose
-- efficiency is unknown weighs nothing and a mean is that of the measured allocation.
-- dash_day_sums(rows): the same sums over any rows of calc_dash_job_day's columns (a project
-- page's rows narrowed by filters dash_day has no column for, such as the state).
CREATE OR REPLACE MACRO dash_day_sums(rows) AS TABLE
SELECT day, cluster, "user", account, "partition",
       count(*) FILTER (WHERE is_first)                                       AS jobs_first,
       count(*)                                                               AS jobs_running,
       count(*) FILTER (WHERE is_first AND flagged)                           AS flagged_first,
       count(*) FILTER (WHERE flagged)                                        AS flagged_running,
       sum(sbu)                                                               AS sbu,
       sum(wasted_sbu)                                                        AS wasted_sbu,
       -- the SBU of the jobs whose waste is known (the share wasted is wasted_sbu over wasted_w)
       sum(sbu) FILTER (WHERE wasted_sbu IS NOT NULL)                         AS wasted_w,
       -- the burn of the jobs whose waste is known less their waste, and of those whose is not
       sum(sbu - wasted_sbu)                                                  AS used_sbu,
       sum(sbu) FILTER (WHERE wasted_sbu IS NULL)                             AS unrated_sbu,
       -- what following the advice would have saved, and the SBU of the jobs whose savings are
       -- known (the share saved is savings_sbu over savings_w)
       sum(savings_sbu)                                                       AS savings_sbu,
       sum(sbu) FILTER (WHERE savings_sbu IS NOT NULL)                        AS savings_w,
       sum(sbu) FILTER (WHERE savings_sbu IS NULL)                            AS savings_unknown_sbu,
       -- the jobs whose savings are unknown (left out of savings_sbu: "not priced"), counted as
       -- jobs_* are, and what they wasted
       count(*) FILTER (WHERE is_first AND savings_sbu IS NULL)               AS unpriced_first,
       count(*) FILTER (WHERE savings_sbu IS NULL)                            AS unpriced_running,
       sum(wasted_sbu) FILTER (WHERE savings_sbu IS NULL)                     AS unpriced_wasted_sbu,
       sum(core_hours)                                                        AS core_hours,
       sum(gpu_hours)                                                         AS gpu_hours,
       -- the jobs left out of core_hours / gpu_hours (an unknown number of cores / GPUs), counted
       -- as jobs_* are
       count(*) FILTER (WHERE is_first AND core_hours IS NULL)                AS core_unknown_first,
       count(*) FILTER (WHERE core_hours IS NULL)                             AS core_unknown_running,
       count(*) FILTER (WHERE is_first AND gpu_hours IS NULL)                 AS gpu_unknown_first,
       count(*) FILTER (WHERE gpu_hours IS NULL)                              AS gpu_unknown_running,
       -- GPU-hours on GPUs counted idle (job_metrics.idle_gpus, split by day in job_day)
       sum(idle_gpu_hours)                                                    AS idle_gpu_hours,
       sum(mem_gib_hours)                                                     AS mem_gib_hours,
       sum(cpu_eff_pct * core_hours)                                          AS cpu_x_w,
       sum(core_hours) FILTER (WHERE cpu_eff_pct IS NOT NULL)                 AS cpu_w,
       sum(gpu_util_pct * gpu_hours)                                          AS gpu_x_w,
       sum(gpu_hours) FILTER (WHERE gpu_util_pct IS NOT NULL)                 AS gpu_w,
       sum(mem_eff_pct * mem_gib_hours)                                       AS mem_x_w,
       sum(mem_gib_hours) FILTER (WHERE mem_eff_pct IS NOT NULL)              AS mem_w,
       sum(time_eff_pct * sbu)                                                AS time_x_w,
       sum(sbu) FILTER (WHERE time_eff_pct IS NOT NULL)                       AS time_w
FROM query_table(rows)
GROUP BY ALL;
CREATE OR REPLACE VIEW calc_dash_day AS SELECT * FROM dash_day_sums('calc_dash_job_day');
