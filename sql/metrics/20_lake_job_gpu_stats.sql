-- The job's GPUs: utilisation time-weighted over its GPUs (and their samples), the least-used GPU,
-- the peak memory share, the GPUs under flags.gpu_idle_pct, the energy.
-- Formulas and where they follow seff / reportseff / jobstats: docs/metrics.md.
SELECT d.cluster, d.job_id_raw,
       min(d.source)  AS gpu_source,
       count(*)       AS gpus_sampled,
       CASE WHEN sum(CASE WHEN d.util_mean_pct IS NOT NULL THEN d.util_weight_s END) > 0
            THEN sum(d.util_mean_pct * d.util_weight_s)
                 / NULLIF(sum(CASE WHEN d.util_mean_pct IS NOT NULL THEN d.util_weight_s END), 0)
            ELSE avg(d.util_mean_pct) END                           AS gpu_util_pct,
       min(d.util_mean_pct)                                         AS gpu_util_min_device_pct,
       max(d.mem_peak_bytes * 100e0 / NULLIF(d.mem_total_bytes, 0)) AS gpu_mem_peak_pct,
       count(CASE WHEN d.util_mean_pct < c.gpu_idle_pct THEN 1 END) AS gpus_idle,
       sum(d.energy_j) / 3.6e6                                      AS gpu_energy_kwh
FROM lake_job_gpu_devices d
JOIN lake_config c ON c.cluster = d.cluster
GROUP BY d.cluster, d.job_id_raw
