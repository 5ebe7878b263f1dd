-- Per-period usage: a job that crosses a period boundary is split in proportion to its time in
-- each period (as XDMoD does). `job_usage_by('day' | 'week' | 'month')`; weeks start on Monday (ISO).
CREATE OR REPLACE MACRO job_usage_by(period) AS TABLE
WITH m AS (
    SELECT *, COALESCE(end_time, start_time + to_seconds(elapsed_s)) AS run_end
    FROM job_metrics
    WHERE start_time IS NOT NULL AND elapsed_s IS NOT NULL
), p AS (
    SELECT m.*, unnest(generate_series(date_trunc(period, start_time), run_end, CAST('1 ' || period AS INTERVAL))) AS period_start
    FROM m
), s AS (
    SELECT p.*,
        CASE WHEN elapsed_s > 0
             THEN GREATEST(date_diff('millisecond', GREATEST(start_time, period_start),
                                     LEAST(run_end, period_start + CAST('1 ' || period AS INTERVAL))), 0) / 1000.0 / elapsed_s
             ELSE 1.0 END AS fraction
    FROM p
)
SELECT cluster, job_id_raw, job_id, "user", account, "partition", state, period_start, fraction,
       sbu * fraction AS sbu, wasted_sbu * fraction AS wasted_sbu,
       core_hours * fraction AS core_hours, gpu_hours * fraction AS gpu_hours,
       elapsed_s * fraction AS elapsed_s
FROM s
WHERE fraction > 0 OR elapsed_s = 0;

CREATE OR REPLACE VIEW usage_daily AS SELECT * FROM job_usage_by('day');
CREATE OR REPLACE VIEW usage_weekly AS SELECT * FROM job_usage_by('week');
