-- Usage per period, from the stored per-job-day rows (job_day, sql/metrics/40_job_day.sql): a job
-- that crosses a period boundary counts with its share of the time in each period.
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
