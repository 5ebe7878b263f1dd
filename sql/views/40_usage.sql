-- Usage per period, from the stored per-job-day rows (job_day, sql/metrics/): a job that crosses a
-- period boundary counts with its share of the time in each period.
-- `job_usage_by('day' | 'week' | 'month')`; weeks start on Monday (ISO).
CREATE OR REPLACE VIEW usage_daily AS
SELECT cluster, job_id_raw, job_id, "user", account, "partition", state, day AS period_start, fraction,
       sbu, wasted_sbu, core_hours, gpu_hours, elapsed_s
FROM job_day;

CREATE OR REPLACE MACRO job_usage_by(period) AS TABLE
SELECT cluster, job_id_raw, any_value(job_id) AS job_id, any_value("user") AS "user",
       any_value(account) AS account, any_value("partition") AS "partition", any_value(state) AS state,
       date_trunc(period, day) AS period_start, sum(fraction) AS fraction,
       sum(sbu) AS sbu, sum(wasted_sbu) AS wasted_sbu, sum(core_hours) AS core_hours,
       sum(gpu_hours) AS gpu_hours, sum(elapsed_s) AS elapsed_s
FROM job_day
GROUP BY cluster, job_id_raw, date_trunc(period, day);

CREATE OR REPLACE VIEW usage_weekly AS SELECT * FROM job_usage_by('week');

-- job_day with each day's share of what following the advice would have saved (day_savings,
-- sql/metrics/46_job_savings.sql: 0 for a job without advice, NULL where it is unknown).
CREATE OR REPLACE VIEW usage_job_day AS
SELECT d.*, day_savings(s.cluster IS NOT NULL, s.savings_sbu, d.fraction) AS savings_sbu
FROM job_day d
LEFT JOIN (SELECT cluster, job_id_raw, savings_sbu FROM job_savings) s USING (cluster, job_id_raw);

-- A part's share of a whole, in percent (NULL when the whole is 0 or NULL).
CREATE OR REPLACE MACRO pct_of(part, whole) AS part * 100.0 / NULLIF(whole, 0);

-- The shares wasted and saved (wasted_pct, savings_pct of usage_summary and the reports) are over
-- the SBU whose waste or savings are known (dash_day's wasted_w and savings_w): a job whose
-- efficiency was not measured has no wasted SBU and weighs in neither; a job without advice saves
-- 0, one whose savings are unknown weighs in neither.

-- `jobsight usage`: jobs, SBU burned, wasted and the advice would have saved (and the jobs whose
-- saving is unknown: unpriced_jobs, with their unpriced_wasted_sbu), core- and GPU-hours (and the jobs
-- they leave out, core_hours_unknown_jobs, gpu_hours_unknown_jobs) of the days [since, until), by
-- `by_key` (user, account, partition, cluster, or the day, ISO week or month as text), for the jobs of
-- the named user, account, partition and cluster (NULL: any). "key" holds the group's value.
-- With plain DuckDB:  SELECT * FROM usage_summary('account', DATE '2026-11-16', DATE '2026-11-23');
--
-- It adds up the stored per-day summaries (dash_day: job_day's rows summed per day, cluster, user,
-- account and partition, kept by the same refresh), tens of thousands of rows rather than job_day's
-- million. A job counts once per group however many days it ran (dash_jobs_in_period,
-- 35_dashboard.sql): on its first day, or on the first day of its group's period inside [since,
-- until) when it started before (period_first: that day for by day, the week's or month's first
-- day inside the range for by week or month, the range's first day otherwise).
CREATE OR REPLACE MACRO usage_summary(by_key, since, until, only_user := NULL, only_account := NULL,
                                      only_partition := NULL, only_cluster := NULL) AS TABLE
WITH r AS (
    -- the first whole day of [since, until)
    SELECT CASE WHEN date_trunc('day', CAST(since AS TIMESTAMP)) = CAST(since AS TIMESTAMP)
                THEN CAST(since AS TIMESTAMP)
                ELSE date_trunc('day', CAST(since AS TIMESTAMP)) + INTERVAL 1 DAY END AS first_day
), d AS (
    SELECT s.*,
           CASE by_key WHEN 'user' THEN "user" WHEN 'account' THEN account WHEN 'partition' THEN "partition"
                       WHEN 'cluster' THEN cluster
                       WHEN 'day' THEN strftime(day, '%Y-%m-%d')
                       WHEN 'week' THEN strftime(date_trunc('week', day), '%G-W%V')
                       WHEN 'month' THEN strftime(day, '%Y-%m')
                       ELSE error('usage_summary: by_key ' || by_key || ': user, account, partition, cluster, day, week or month')
           END                                                                AS "key",
           CASE by_key WHEN 'day' THEN day
                       WHEN 'week' THEN greatest(date_trunc('week', day), r.first_day)
                       WHEN 'month' THEN greatest(date_trunc('month', day), r.first_day)
                       ELSE r.first_day END                                   AS period_first
    FROM dash_day s, r
    WHERE day >= since AND day < until
      AND (only_user IS NULL OR "user" = only_user) AND (only_account IS NULL OR account = only_account)
      AND (only_partition IS NULL OR "partition" = only_partition) AND (only_cluster IS NULL OR cluster = only_cluster)
)
SELECT "key",
       CAST(dash_jobs_in_period(jobs_first, jobs_running, day, period_first) AS BIGINT) AS jobs,
       sum(sbu)                                                               AS sbu,
       sum(wasted_sbu)                                                        AS wasted_sbu,
       pct_of(sum(wasted_sbu), sum(wasted_w))                                 AS wasted_pct,
       sum(savings_sbu)                                                       AS savings_sbu,
       pct_of(sum(savings_sbu), sum(savings_w))                               AS savings_pct,
       -- the jobs left out of savings_sbu because their saving is unknown, and what they wasted
       CAST(dash_jobs_in_period(unpriced_first, unpriced_running, day, period_first) AS BIGINT) AS unpriced_jobs,
       COALESCE(sum(unpriced_wasted_sbu), 0)                                  AS unpriced_wasted_sbu,
       sum(core_hours)                                                        AS core_hours,
       sum(gpu_hours)                                                         AS gpu_hours,
       -- the jobs left out of core_hours / gpu_hours: they ran on an unknown number of cores / GPUs
       CAST(dash_jobs_in_period(core_unknown_first, core_unknown_running, day, period_first) AS BIGINT) AS core_hours_unknown_jobs,
       CAST(dash_jobs_in_period(gpu_unknown_first, gpu_unknown_running, day, period_first) AS BIGINT) AS gpu_hours_unknown_jobs
FROM d
GROUP BY "key";
