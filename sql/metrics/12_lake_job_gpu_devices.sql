-- lake_job_gpu_devices (stored as job_gpu_devices): one row per GPU of a job. A job's GPU samples
-- come from one source: the sidecar when it has any for that job, else nvidia-smi logs (their
-- device names differ, so never mix them). Each device is summarised per source first, then the
-- job's first source by that rule is kept (the same as choosing among its samples, and cheaper).
-- A time-weighted mean ignores NULL values and falls back to a plain mean when no sample has a
-- weight: CASE WHEN sum(w of non-NULL v) > 0 THEN sum(v * w) / sum(w of non-NULL v) ELSE avg(v) END.
SELECT cluster, job_id_raw, host, device, source, gpu_index, n_samples, first_time, last_time,
       util_mean_pct, util_max_pct, util_weight_s, mem_peak_bytes, mem_total_bytes, energy_j,
       power_mean_w, sm_active_mean_pct
FROM (
    SELECT cluster, job_id_raw, host, device, source,
           min(gpu_index)                                        AS gpu_index,
           count(*)                                              AS n_samples,
           min(time)                                             AS first_time,
           max(time)                                             AS last_time,
           CASE WHEN sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END) > 0
                THEN sum(util_pct * weight_s) / NULLIF(sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END), 0)
                ELSE avg(util_pct) END                           AS util_mean_pct,
           max(util_pct)                                         AS util_max_pct,
           sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END) AS util_weight_s,
           max(mem_used_bytes)                                   AS mem_peak_bytes,
           max(mem_total_bytes)                                  AS mem_total_bytes,
           max(energy_j) - min(energy_j)                         AS energy_j,
           CASE WHEN sum(CASE WHEN power_w IS NOT NULL THEN weight_s END) > 0
                THEN sum(power_w * weight_s) / NULLIF(sum(CASE WHEN power_w IS NOT NULL THEN weight_s END), 0)
                ELSE avg(power_w) END                            AS power_mean_w,
           CASE WHEN sum(CASE WHEN sm_active_pct IS NOT NULL THEN weight_s END) > 0
                THEN sum(sm_active_pct * weight_s)
                     / NULLIF(sum(CASE WHEN sm_active_pct IS NOT NULL THEN weight_s END), 0)
                ELSE avg(sm_active_pct) END                      AS sm_active_mean_pct,
           dense_rank() OVER (PARTITION BY cluster, job_id_raw
                              ORDER BY CASE source WHEN 'sidecar' THEN 0 ELSE 1 END) AS source_rank
    FROM lake_sample_weighted
    WHERE device <> 'cpu'
    GROUP BY cluster, job_id_raw, host, device, source
) per_device
WHERE source_rank = 1
