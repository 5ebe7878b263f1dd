-- calc_job_day (stored as job_day): one row per job and UTC day it ran. A job that crosses a day
-- boundary is split in proportion to its time in each day (as XDMoD does); weeks and months are sums
-- of days (sql/views/40_usage.sql), so every reader splits time by this one rule. is_first marks the
-- job's first day, so that a count of jobs over any run of days needs no per-job scan (dash_day): the
-- day it started, the series' first, which is kept whenever any is (a later day has time only if
-- the job ran past the first's end).
CREATE OR REPLACE VIEW calc_job_day AS
WITH m AS (
    SELECT *, COALESCE(end_time, start_time + to_seconds(elapsed_s)) AS run_end
    FROM scoped_job_metrics
    WHERE start_time IS NOT NULL AND elapsed_s IS NOT NULL
), d AS (
    SELECT m.*, unnest(generate_series(date_trunc('day', start_time), run_end, INTERVAL 1 DAY)) AS day
    FROM m
), s AS (
    SELECT d.*,
        CASE WHEN elapsed_s > 0
             THEN GREATEST(date_diff('millisecond', GREATEST(start_time, day),
                                     LEAST(run_end, day + INTERVAL 1 DAY)), 0) / 1000.0 / elapsed_s
             ELSE 1.0 END AS fraction
    FROM d
)
SELECT s.cluster, s.job_id_raw, s.job_id, s."user", s.account, s."partition", s.state, s.day, s.fraction,
       s.sbu * s.fraction                                                     AS sbu,
       s.wasted_sbu * s.fraction                                              AS wasted_sbu,
       s.core_hours * s.fraction                                              AS core_hours,
       s.gpu_hours * s.fraction                                               AS gpu_hours,
       s.elapsed_s * s.fraction                                               AS elapsed_s,
       -- GiB-hours of the memory charged, and GPU-hours on GPUs counted idle (job_metrics.idle_gpus)
       s.elapsed_s * s.fraction / 3600.0 * COALESCE(s.mem_charged_bytes, 0) / 1073741824.0 AS mem_gib_hours,
       s.elapsed_s * s.fraction / 3600.0 * s.idle_gpus                        AS idle_gpu_hours,
       s.job_name, s.cpu_eff_pct, s.gpu_util_pct, s.mem_eff_pct, s.time_eff_pct,
       s.start_time, s.elapsed_s AS job_elapsed_s, s.ncpus, s.ngpus, s.charge_driver,
       s.day = date_trunc('day', s.start_time)                                AS is_first
FROM s
WHERE s.fraction > 0 OR s.elapsed_s = 0;
