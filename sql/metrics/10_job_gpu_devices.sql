-- Per-job summaries of the sample time series (sidecar, nvidia-smi).
--
-- sql/metrics/ holds the per-job definitions. Their views (calc_*) compute the jobs listed in
-- metric_scope only; analytics/store.py fills metric_scope with the jobs an ingest touched (or all
-- jobs, after a change of settings or of these files) and stores the results in the tables
-- job_metrics, job_gpu_devices, job_flags and job_day, which every reader uses.

CREATE OR REPLACE VIEW scope_jobs AS
SELECT j.* FROM jobs j SEMI JOIN metric_scope m USING (cluster, job_id_raw);

CREATE OR REPLACE VIEW scope_samples AS
SELECT s.* FROM sample s SEMI JOIN metric_scope m USING (cluster, job_id_raw);

-- Time-weighted mean that ignores NULL values; falls back to a plain mean when no sample has a weight.
CREATE OR REPLACE MACRO wmean(v, w) AS
    CASE WHEN sum(CASE WHEN v IS NOT NULL THEN w END) > 0
         THEN sum(v * w) / sum(CASE WHEN v IS NOT NULL THEN w END)
         ELSE avg(v) END;

-- A setting from jobsight.toml (analytics/config.py writes every one, defaults included, each time a
-- command opens the database read-write). The defaults live only there: a missing setting is an
-- error, never a silent fallback.
CREATE OR REPLACE MACRO setting_value(n) AS (
    SELECT CASE WHEN count(*) = 1 AND max(value) IS NOT NULL THEN max(value)
                ELSE error('jobsight: setting ' || n || ' is not in the setting table; open the database read-write with this jobsight') END
    FROM setting WHERE name = n);
CREATE OR REPLACE MACRO setting_text(n) AS (
    SELECT CASE WHEN count(*) = 1 AND max(text) IS NOT NULL THEN max(text)
                ELSE error('jobsight: setting ' || n || ' is not in the setting table; open the database read-write with this jobsight') END
    FROM setting WHERE name = n);

-- Each sample weighs the time until the next sample of the same device (the last one: the time
-- since the previous), capped at samples.max_gap_s so that a gap in the record does not let one
-- sample stand for hours.
CREATE OR REPLACE VIEW calc_sample_weighted AS
SELECT s.*,
       LEAST(COALESCE(date_diff('millisecond', s.time, LEAD(s.time) OVER w),
                      date_diff('millisecond', LAG(s.time) OVER w, s.time), 0) / 1000.0,
             setting_value('samples.max_gap_s')) AS weight_s
FROM scope_samples s
WINDOW w AS (PARTITION BY s.cluster, s.job_id_raw, s.host, s.device ORDER BY s.time);

-- One row per GPU of a job. A job's GPU samples come from one source: the sidecar when it
-- has any for that job, else nvidia-smi logs (their device names differ, so never mix them).
CREATE OR REPLACE VIEW calc_job_gpu_devices AS
WITH gpu AS (
    SELECT * FROM calc_sample_weighted
    WHERE device <> 'cpu'
    QUALIFY dense_rank() OVER (PARTITION BY cluster, job_id_raw
                               ORDER BY CASE source WHEN 'sidecar' THEN 0 ELSE 1 END) = 1
)
SELECT cluster, job_id_raw, host, device, source,
       min(gpu_index)                                   AS gpu_index,
       count(*)                                         AS n_samples,
       min(time)                                        AS first_time,
       max(time)                                        AS last_time,
       wmean(util_pct, weight_s)                        AS util_mean_pct,
       max(util_pct)                                    AS util_max_pct,
       sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END) AS util_weight_s,
       max(mem_used_bytes)                              AS mem_peak_bytes,
       max(mem_total_bytes)                             AS mem_total_bytes,
       max(energy_j) - min(energy_j)                    AS energy_j,
       wmean(power_w, weight_s)                         AS power_mean_w,
       wmean(sm_active_pct, weight_s)                   AS sm_active_mean_pct
FROM gpu
GROUP BY cluster, job_id_raw, host, device, source;
