-- What the dashboard reads (dashboard/queries.py), from the stored per-job results. A published
-- snapshot (analytics/snapshot.py) holds each dash_src_* relation materialised as a table dash_*
-- (`CREATE TABLE dash_day AS SELECT * FROM dash_src_day`); a database with no snapshot yet is read
-- through these views themselves, so both answer with the same SQL.
--
-- Days are UTC days of job_day (sql/metrics/40_job_day.sql): a job's SBU, wasted SBU and hours are
-- split across the days it ran in proportion to its time in each, exactly as the weekly reports
-- (50_report.sql) and `jobsight usage` (40_usage.sql) split them. A job counts in a period when it
-- has a job_day row in it (it ran then), once however many days of the period it ran, as
-- report_totals' count(DISTINCT (cluster, job_id_raw)); a flagged job is one of those with at
-- least one row in job_flags (as report_flag_counts).
--
-- Counting distinct jobs over any run of days without a per-job scan: every job_day row says
-- whether it is its job's first day (is_first). The jobs that ran in [since, until] are those whose
-- first day is in it, plus those already running on `since` that started before it; so per day it
-- is enough to keep two counts, jobs starting that day (n_first) and jobs running that day
-- (n_running), and take n_running on the period's first day and n_first on the others:
CREATE OR REPLACE MACRO dash_jobs_in_period(n_first, n_running, day, since) AS
    sum(CASE WHEN day = since THEN n_running ELSE n_first END);
-- (with no `since`, since is NULL and every day adds its n_first: each job once, on its first day).
-- The same rule row by row: a job's row counts it when it is the job's first day or the period's.
CREATE OR REPLACE MACRO dash_job_once(is_first, day, since) AS is_first OR day = since;

-- The 10 % efficiency bin of a job (0 ... 9, over 100 % in the last); NULL when not measured.
CREATE OR REPLACE MACRO dash_bin(pct) AS
    CASE WHEN pct IS NOT NULL THEN CAST(LEAST(floor(GREATEST(pct, 0) / 10), 9) AS TINYINT) END;

-- One row per job and day it ran: job_day's row with its first-day mark and whether the job has a
-- flag.
CREATE OR REPLACE VIEW dash_src_job_day AS
SELECT d.*,
       d.day = min(d.day) OVER (PARTITION BY d.cluster, d.job_id_raw)        AS is_first,
       (d.cluster, d.job_id_raw) IN (SELECT (cluster, job_id_raw) FROM job_flags) AS flagged
FROM job_day d;

-- The same rows narrowed to what the efficiency histogram filters and counts (dash_eff_day): per
-- day, cluster, user, account, partition, first-day mark and the job's 10 % bin of each efficiency,
-- how many jobs (n). The histogram of a period sums n over the rows dash_job_once keeps.
CREATE OR REPLACE VIEW dash_src_eff_day AS
SELECT day, cluster, "user", account, "partition", is_first,
       dash_bin(cpu_eff_pct) AS cpu_bin, dash_bin(gpu_util_pct) AS gpu_bin,
       dash_bin(mem_eff_pct) AS mem_bin, dash_bin(time_eff_pct) AS time_bin,
       count(*) AS n
FROM dash_src_job_day
GROUP BY ALL;

-- Per day, cluster, user, account and partition (dash_day): the sums the overview, the users and
-- projects tables and the usage chart add up over a period, and the per-day job counts above.
-- Efficiencies are the reports' allocation-weighted means (alloc_weighted in 50_report.sql): CPU
-- weighted by core-hours, GPU by GPU-hours, memory by GiB-hours, time by SBU; *_x_w is the sum
-- of efficiency x weight, *_w the weight of the jobs whose efficiency is known.
CREATE OR REPLACE VIEW dash_src_day AS
SELECT day, cluster, "user", account, "partition",
       count(*) FILTER (WHERE is_first)                                       AS jobs_first,
       count(*)                                                               AS jobs_running,
       count(*) FILTER (WHERE is_first AND flagged)                           AS flagged_first,
       count(*) FILTER (WHERE flagged)                                        AS flagged_running,
       sum(sbu)                                                               AS sbu,
       sum(wasted_sbu)                                                        AS wasted_sbu,
       sum(core_hours)                                                        AS core_hours,
       sum(gpu_hours)                                                         AS gpu_hours,
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
FROM dash_src_job_day
GROUP BY ALL;

-- Per day, cluster, user, account, partition, flag code and severity (dash_flag_day): the flagged
-- jobs of the flag-count chart (counted as above: also the number of flags of the jobs that ran in
-- a period, the flagged-jobs grid's total) and their SBU burned that day.
CREATE OR REPLACE VIEW dash_src_flag_day AS
SELECT d.day, d.cluster, d."user", d.account, d."partition", f.code, f.severity,
       count(*) FILTER (WHERE d.is_first)                                     AS jobs_first,
       count(*)                                                               AS jobs_running,
       sum(d.sbu)                                                             AS sbu
FROM dash_src_job_day d JOIN job_flags f USING (cluster, job_id_raw)
GROUP BY ALL;

-- The flags (dash_job_flags) with the first and last day their job ran (NULL when it has no
-- job_day row: it never ran), so that the flagged-jobs grid takes the flags of the jobs that ran
-- in its period, the jobs the counts above count.
CREATE OR REPLACE VIEW dash_src_job_flags AS
SELECT f.*, r.first_day, r.last_day
FROM job_flags f
LEFT JOIN (SELECT cluster, job_id_raw, min(day) AS first_day, max(day) AS last_day FROM job_day GROUP BY ALL) r
    USING (cluster, job_id_raw);

-- The jobs (dash_job_metrics) with how many flags each has (0 for none).
CREATE OR REPLACE VIEW dash_src_job_metrics AS
SELECT m.*, COALESCE(f.n_flags, 0) AS n_flags
FROM job_metrics m
LEFT JOIN (SELECT cluster, job_id_raw, count(*) AS n_flags FROM job_flags GROUP BY ALL) f USING (cluster, job_id_raw);

-- For each day, the n most wasteful flags of the jobs that ran that day, in the grid's order
-- (FLAG_ORDER in analytics/snapshot.py: the same columns, the same directions). The unfiltered
-- grid of any run of days is the top of the union of its days' rows, exactly: a flag among the top
-- n of the period is among the top n of each day its job ran in it. (Ranked on the key columns
-- only, then joined to the flags' text: the sort does not carry messages and advice.)
CREATE OR REPLACE MACRO dash_src_flag_top(n) AS TABLE
WITH top AS (
    SELECT d.day, f.cluster, f.job_id_raw, f.code
    FROM job_flags f JOIN job_day d USING (cluster, job_id_raw)
    QUALIFY row_number() OVER (
        PARTITION BY d.day
        ORDER BY COALESCE(f.wasted_sbu, 0) DESC, f.sbu DESC, f.cluster, f.job_id_raw, f.code) <= n
)
SELECT top.day, f.*
FROM top JOIN dash_src_job_flags f USING (cluster, job_id_raw, code);
