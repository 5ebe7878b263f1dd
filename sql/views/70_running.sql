-- Running now (the dashboard's /running page, dashboard/running_queries.py): the jobs whose latest
-- accounting record says RUNNING, what their latest samples show, and the GPUs wasting now.
-- A running job's elapsed and SBU are those of its latest sacct record (so far, as of that run).

-- One row per device (the CPU row, each GPU) of a running job on each host, from one pass over
-- its samples (a hash aggregate: no sort of the samples). GPUs from one source, as the metrics
-- take them: the sidecar's when the job has any, else nvidia-smi's. At its latest sample: the time
-- and the utilisation. For a GPU, idle_min: how long it has been under flags.gpu_idle_pct up to
-- that sample, since its last sample at or above it (or without a reading, which is no evidence of
-- idleness, as in the sidecar's idle alert), or since its first sample when it never was; 0 when
-- the latest sample is busy. idle_now: idle for at least flags.running_gpu_idle_min minutes.
CREATE OR REPLACE VIEW running_devices AS
WITH d AS (
    SELECT s.cluster, s.job_id_raw, s.host, s.device, s.source, min(s.gpu_index) AS gpu_index,
           min(s.time) AS first_time, max(s.time) AS last_time, arg_max(s.util_pct, s.time) AS util_pct,
           max(s.time) FILTER (WHERE s.util_pct IS NULL OR s.util_pct >= setting_value('flags.gpu_idle_pct')) AS last_busy
    FROM samples s
    SEMI JOIN (SELECT cluster, job_id_raw FROM job_metrics WHERE state = 'RUNNING') r USING (cluster, job_id_raw)
    GROUP BY s.cluster, s.job_id_raw, s.host, s.device, s.source
), g AS (
    SELECT *, bool_or(source = 'sidecar' AND device <> 'cpu') OVER (PARTITION BY cluster, job_id_raw) AS sidecar_gpus,
           CASE WHEN device <> 'cpu'
                THEN date_diff('second', coalesce(last_busy, first_time), last_time) / 60.0 END AS idle_min
    FROM d
)
SELECT cluster, job_id_raw, host, device, source, gpu_index, last_time, util_pct, idle_min,
       idle_min >= setting_value('flags.running_gpu_idle_min') AS idle_now
FROM g
WHERE device = 'cpu' OR source = 'sidecar' OR NOT sidecar_gpus;

-- One row per GPU of a running job that has samples (running_devices' GPU rows).
CREATE OR REPLACE VIEW running_gpus AS
SELECT cluster, job_id_raw, host, device, gpu_index, last_time, util_pct, idle_min, idle_now
FROM running_devices WHERE device <> 'cpu';

-- One row per running job: its accounting so far, SBU per hour (its SBU so far over its elapsed
-- time), and from its latest samples: the CPU rows' utilisation (% of the allocated cores busy,
-- the mean over its hosts), the mean utilisation of its GPUs, the GPUs idle now, the longest idle
-- run, and idle_sbu_per_h, the share of its SBU per hour that pays for the GPUs idle now
-- (GPU-charged jobs).
CREATE OR REPLACE VIEW running_jobs AS
WITH a AS (
    SELECT cluster, job_id_raw,
           avg(util_pct) FILTER (WHERE device = 'cpu') AS cpu_util_now_pct,
           avg(util_pct) FILTER (WHERE device <> 'cpu') AS gpu_util_now_pct,
           count(*) FILTER (WHERE device <> 'cpu') AS gpus_sampled,
           count(*) FILTER (WHERE idle_now) AS gpus_idle_now,
           max(idle_min) AS gpu_idle_max_min, max(last_time) AS last_sample
    FROM running_devices GROUP BY cluster, job_id_raw
)
SELECT m.cluster, m.job_id, m.job_id_raw, m.job_name, m."user", m.account, m."partition", m.state,
       m.start_time, m.elapsed_s, m.ncpus, m.ngpus, m.sbu, m.charge_driver,
       m.sbu * 3600.0 / NULLIF(m.elapsed_s, 0) AS sbu_per_h,
       a.cpu_util_now_pct, a.gpu_util_now_pct, a.gpus_sampled, coalesce(a.gpus_idle_now, 0) AS gpus_idle_now,
       a.gpu_idle_max_min,
       CASE WHEN m.charge_driver = 'gpu' AND m.ngpus > 0
            THEN m.sbu * 3600.0 / NULLIF(m.elapsed_s, 0) * coalesce(a.gpus_idle_now, 0) / m.ngpus END AS idle_sbu_per_h,
       a.last_sample
FROM job_metrics m
LEFT JOIN a USING (cluster, job_id_raw)
WHERE m.state = 'RUNNING';
