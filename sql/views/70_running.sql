-- Running now (the dashboard's /running page, dashboard/running_queries.py): the jobs whose latest
-- accounting record says RUNNING, what their latest samples show, and the GPUs wasting now.
-- A running job's elapsed and SBU are those of its latest sacct record (so far, as of that dump).

-- One row per GPU of a running job that has samples. GPUs from one source, as the metrics take them:
-- the sidecar's when the job has any, else nvidia-smi's. At its latest sample: the time and the
-- utilisation; idle_min: how long it has been under flags.gpu_idle_pct up to that sample, from the
-- first sample after its last one at or above it (or without a reading, which is no evidence of
-- idleness, as in the sidecar's idle alert); 0 when its latest sample is busy. idle_now: idle for
-- at least flags.running_gpu_idle_min minutes.
CREATE OR REPLACE VIEW running_gpus AS
WITH s AS (
    SELECT s.cluster, s.job_id_raw, s.host, s.device, s.gpu_index, s.time, s.util_pct, s.source,
           bool_or(s.source = 'sidecar') OVER (PARTITION BY s.cluster, s.job_id_raw) AS has_sidecar
    FROM sample s
    SEMI JOIN (SELECT cluster, job_id_raw FROM job_metrics WHERE state = 'RUNNING') r USING (cluster, job_id_raw)
    WHERE s.device <> 'cpu'
), b AS (
    SELECT *, max(time) FILTER (WHERE util_pct IS NULL OR util_pct >= setting_value('flags.gpu_idle_pct'))
                  OVER (PARTITION BY cluster, job_id_raw, host, device) AS last_busy
    FROM s WHERE source = 'sidecar' OR NOT has_sidecar
), d AS (
    SELECT cluster, job_id_raw, host, device, min(gpu_index) AS gpu_index, max(time) AS last_time,
           arg_max(util_pct, time) AS util_pct,
           min(time) FILTER (WHERE last_busy IS NULL OR time > last_busy) AS idle_since
    FROM b GROUP BY cluster, job_id_raw, host, device
)
SELECT *, idle_min >= setting_value('flags.running_gpu_idle_min') AS idle_now
FROM (SELECT cluster, job_id_raw, host, device, gpu_index, last_time, util_pct,
             coalesce(date_diff('second', idle_since, last_time) / 60.0, 0) AS idle_min
      FROM d);

-- One row per running job: its accounting so far, SBU per hour (its SBU so far over its elapsed
-- time), and from its latest samples: the CPU row's utilisation (% of the allocated cores busy),
-- the mean utilisation of its GPUs, the GPUs idle now, the longest idle run, and idle_sbu_per_h,
-- the share of its SBU per hour that pays for the GPUs idle now (GPU-charged jobs).
CREATE OR REPLACE VIEW running_jobs AS
WITH g AS (
    SELECT cluster, job_id_raw, count(*) AS gpus_sampled, avg(util_pct) AS gpu_util_now_pct,
           count(*) FILTER (WHERE idle_now) AS gpus_idle_now, max(idle_min) AS gpu_idle_max_min,
           max(last_time) AS last_gpu_sample
    FROM running_gpus GROUP BY cluster, job_id_raw
), c AS (
    SELECT cluster, job_id_raw, arg_max(util_pct, time) AS cpu_util_now_pct, max(time) AS last_cpu_sample
    FROM sample
    SEMI JOIN (SELECT cluster, job_id_raw FROM job_metrics WHERE state = 'RUNNING') r USING (cluster, job_id_raw)
    WHERE device = 'cpu'
    GROUP BY cluster, job_id_raw
)
SELECT m.cluster, m.job_id, m.job_id_raw, m.job_name, m."user", m.account, m."partition", m.state,
       m.start_time, m.elapsed_s, m.ncpus, m.ngpus, m.sbu, m.charge_driver,
       m.sbu * 3600.0 / NULLIF(m.elapsed_s, 0) AS sbu_per_h,
       c.cpu_util_now_pct, g.gpu_util_now_pct, g.gpus_sampled, coalesce(g.gpus_idle_now, 0) AS gpus_idle_now,
       g.gpu_idle_max_min,
       CASE WHEN m.charge_driver = 'gpu' AND m.ngpus > 0
            THEN m.sbu * 3600.0 / NULLIF(m.elapsed_s, 0) * coalesce(g.gpus_idle_now, 0) / m.ngpus END AS idle_sbu_per_h,
       greatest(c.last_cpu_sample, g.last_gpu_sample) AS last_sample
FROM job_metrics m
LEFT JOIN g USING (cluster, job_id_raw)
LEFT JOIN c USING (cluster, job_id_raw)
WHERE m.state = 'RUNNING';
