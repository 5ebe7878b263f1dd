-- lake_job_cpu_hosts (stored as job_cpu_hosts): one row per host of a job with sidecar `cpu`
-- rows: its time-weighted CPU utilisation, the weight behind it, its peak memory and cgroup limit.
-- Stored, like lake_job_gpu_devices, so that a change of a per-job setting recomputes the jobs from
-- these rows rather than weighing every sample again.
SELECT cluster, job_id_raw, host,
       CASE WHEN sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END) > 0
            THEN sum(util_pct * weight_s) / NULLIF(sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END), 0)
            ELSE avg(util_pct) END                           AS util_pct,
       sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END) AS weight_s,
       max(mem_used_bytes)                                   AS mem_peak_bytes,
       max(mem_total_bytes)                                  AS mem_limit_bytes,
       count(*)                                              AS n_samples,
       min(time)                                             AS first_time,
       max(time)                                             AS last_time
FROM lake_sample_weighted
WHERE device = 'cpu'
GROUP BY cluster, job_id_raw, host
