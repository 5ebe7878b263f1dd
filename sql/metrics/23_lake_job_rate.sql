-- The charge_rate row of the job's cluster that applies to it: its partition before '*', its GPU
-- type before any.
SELECT cluster, job_id_raw, per_core_h, per_gpu_h, per_gb_h, min_cores, min_gpus,
       mem_per_core_gb, cores_per_gpu, mem_per_gpu_gb
FROM (
    SELECT j.cluster, j.job_id_raw, r.per_core_h, r.per_gpu_h, r.per_gb_h, r.min_cores, r.min_gpus,
           r.mem_per_core_gb, r.cores_per_gpu, r.mem_per_gpu_gb,
           row_number() OVER (PARTITION BY j.cluster, j.job_id_raw
                              ORDER BY CASE WHEN r.partition = j.partition THEN 1 ELSE 0 END DESC,
                                       CASE WHEN r.gpu_type IS NOT NULL THEN 1 ELSE 0 END DESC) AS pick
    FROM lake_jobs j
    JOIN lake_charge_rate r
      ON r.cluster = j.cluster
     AND (r.partition = j.partition OR r.partition = '*')
     AND (r.gpu_type IS NULL OR r.gpu_type = j.gpu_type)
) ranked
WHERE pick = 1
