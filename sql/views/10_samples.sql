-- Per-job summaries of the sample time series (sidecar, nvidia-smi).

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
CREATE OR REPLACE VIEW sample_weighted AS
SELECT s.*,
       LEAST(COALESCE(date_diff('millisecond', s.time, LEAD(s.time) OVER w),
                      date_diff('millisecond', LAG(s.time) OVER w, s.time), 0) / 1000.0,
             setting_value('samples.max_gap_s')) AS weight_s
FROM sample s
WINDOW w AS (PARTITION BY s.cluster, s.job_id_raw, s.host, s.device ORDER BY s.time);

-- One row per GPU of a job. A job's GPU samples come from one source: the sidecar when it
-- has any for that job, else nvidia-smi logs (their device names differ, so never mix them).
CREATE OR REPLACE VIEW job_gpu_devices AS
WITH gpu AS (
    SELECT * FROM sample_weighted
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

CREATE OR REPLACE VIEW job_gpu_stats AS
SELECT cluster, job_id_raw,
       any_value(source)                                AS gpu_source,
       count(*)                                         AS gpus_sampled,
       wmean(util_mean_pct, util_weight_s)              AS gpu_util_pct,
       min(util_mean_pct)                               AS gpu_util_min_device_pct,
       max(mem_peak_bytes * 100.0 / NULLIF(mem_total_bytes, 0)) AS gpu_mem_peak_pct,
       count(*) FILTER (WHERE util_mean_pct < setting_value('flags.gpu_idle_pct')) AS gpus_idle,
       sum(energy_j) / 3.6e6                            AS gpu_energy_kwh
FROM job_gpu_devices
GROUP BY cluster, job_id_raw;

-- The job's CPU and memory as the sidecar saw them (its `cpu` rows): per host first, then summed
-- (memory) or time-weighted (CPU) over hosts, as jobstats does per node.
CREATE OR REPLACE VIEW job_cpu_samples AS
WITH per_host AS (
    SELECT cluster, job_id_raw, host,
           wmean(util_pct, weight_s)                                 AS util_pct,
           sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END)     AS weight_s,
           max(mem_used_bytes)                                       AS mem_peak_bytes,
           max(mem_total_bytes)                                      AS mem_limit_bytes,
           count(*)                                                  AS n_samples,
           min(time) AS first_time, max(time) AS last_time
    FROM sample_weighted
    WHERE device = 'cpu'
    GROUP BY cluster, job_id_raw, host
)
SELECT cluster, job_id_raw,
       count(*)                    AS hosts_sampled,
       wmean(util_pct, weight_s)   AS cpu_util_pct,
       sum(mem_peak_bytes)         AS mem_peak_bytes,
       sum(mem_limit_bytes)        AS mem_limit_bytes,
       sum(n_samples)              AS n_samples,
       min(first_time)             AS first_time,
       max(last_time)              AS last_time
FROM per_host
GROUP BY cluster, job_id_raw;
