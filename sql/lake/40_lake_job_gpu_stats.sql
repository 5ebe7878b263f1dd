-- sql/views/10_samples.sql job_gpu_stats: the job's GPU utilisation, time-weighted over its GPUs.
SELECT d.cluster, d.job_id_raw,
       min(d.source)  AS gpu_source,
       count(*)       AS gpus_sampled,
       CASE WHEN sum(CASE WHEN d.util_mean_pct IS NOT NULL THEN d.util_weight_s END) > 0
            THEN sum(d.util_mean_pct * d.util_weight_s)
                 / NULLIF(sum(CASE WHEN d.util_mean_pct IS NOT NULL THEN d.util_weight_s END), 0)
            ELSE avg(d.util_mean_pct) END AS gpu_util_pct,
       min(d.util_mean_pct) AS gpu_util_min_device_pct,
       max(d.mem_peak_bytes * 100e0 / NULLIF(d.mem_total_bytes, 0)) AS gpu_mem_peak_pct,
       sum(CASE WHEN d.util_mean_pct < COALESCE(c.gpu_idle_pct, 1e0) THEN 1 ELSE 0 END) AS gpus_idle
FROM lake_job_gpu_devices d
LEFT JOIN lake_config c ON c.cluster = d.cluster
GROUP BY d.cluster, d.job_id_raw
