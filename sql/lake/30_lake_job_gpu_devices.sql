-- sql/views/10_samples.sql job_gpu_devices: one row per GPU of a job, from one source only
-- (the sidecar when it has any GPU sample of the job, else nvidia-smi logs).
-- The CASE ... sum(v * w) / sum(w) ... ELSE avg(v) is the wmean() macro written out.
SELECT cluster, job_id_raw, host, device, source,
       min(gpu_index) AS gpu_index,
       count(*)       AS n_samples,
       CASE WHEN sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END) > 0
            THEN sum(util_pct * weight_s) / NULLIF(sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END), 0)
            ELSE avg(util_pct) END                            AS util_mean_pct,
       max(util_pct)                                         AS util_max_pct,
       sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END) AS util_weight_s,
       max(mem_used_bytes)                                   AS mem_peak_bytes,
       max(mem_total_bytes)                                  AS mem_total_bytes
FROM (
    SELECT w.*,
           dense_rank() OVER (PARTITION BY cluster, job_id_raw
                              ORDER BY CASE source WHEN 'sidecar' THEN 0 ELSE 1 END) AS source_rank
    FROM lake_sample_weighted w
    WHERE device <> 'cpu'
) gpu
WHERE source_rank = 1
GROUP BY cluster, job_id_raw, host, device, source
