-- sql/views/20_job_metrics.sql job_metrics: per job, the GPU utilisation and the SBU charged.
--   gpu_util_pct: samples (time-weighted over GPUs and samples), else Slurm's gres/gpuutil.
--   sbu: policy slurm-billing and a billing TRES: billing x hours x charging.factor; else with a
--        charge rate: hours x (charged cores x per_core_h + charged GPUs x per_gpu_h + GiB x per_gb_h);
--        else core-hours.
-- GREATEST gets no NULL argument (no rate: 0), which equals DuckDB's and Spark's NULL-skipping
-- GREATEST for these non-negative counts, and keeps Trino (whose GREATEST returns NULL) right too.
SELECT cluster, job_id_raw, job_id, account, partition, state, elapsed_s, ncpus, ngpus,
       gpu_util_pct, gpu_util_source, gpus_sampled, gpus_idle, gpu_util_min_device_pct,
       charged_cores, charged_gpus,
       CASE WHEN charging_policy = 'slurm-billing' AND billing IS NOT NULL
                THEN billing * elapsed_s / 3600e0 * COALESCE(charging_factor, 1e0)
            WHEN per_core_h IS NOT NULL
                THEN elapsed_s / 3600e0 * (charged_cores * per_core_h + charged_gpus * per_gpu_h
                                           + mem_gib * per_gb_h)
            ELSE core_hours END AS sbu,
       CASE WHEN charging_policy = 'slurm-billing' AND billing IS NOT NULL THEN 'billing'
            WHEN per_core_h IS NOT NULL THEN 'table'
            ELSE 'core-hours' END AS sbu_source,
       core_hours, gpu_hours
FROM (
    SELECT j.cluster, j.job_id_raw, j.job_id, j.account, j.partition, j.state, j.elapsed_s,
           j.ncpus, j.ngpus, j.billing,
           COALESCE(g.gpu_util_pct, CASE WHEN j.ngpus > 0 THEN j.gpu_util_tres END) AS gpu_util_pct,
           CASE WHEN g.gpu_util_pct IS NOT NULL THEN g.gpu_source
                WHEN j.ngpus > 0 AND j.gpu_util_tres IS NOT NULL THEN 'slurm-tres' END AS gpu_util_source,
           g.gpus_sampled, g.gpus_idle, g.gpu_util_min_device_pct,
           c.charging_policy, c.charging_factor,
           r.per_core_h, r.per_gpu_h, r.per_gb_h,
           COALESCE(j.mem_alloc_bytes, j.mem_req_bytes, m.mem_limit_bytes, 0) / 1073741824e0 AS mem_gib,
           GREATEST(COALESCE(j.ncpus, 0), COALESCE(r.min_cores, 0),
                    COALESCE(ceil(COALESCE(j.mem_alloc_bytes, j.mem_req_bytes, m.mem_limit_bytes, 0)
                                  / 1073741824e0 / NULLIF(r.mem_per_core_gb, 0)), 0)) AS charged_cores,
           CASE WHEN COALESCE(j.ngpus, 0) > 0 THEN
                GREATEST(j.ngpus, COALESCE(r.min_gpus, 0),
                         COALESCE(ceil(COALESCE(j.ncpus, 0) / NULLIF(r.cores_per_gpu, 0)), 0),
                         COALESCE(ceil(COALESCE(j.mem_alloc_bytes, j.mem_req_bytes, m.mem_limit_bytes, 0)
                                       / 1073741824e0 / NULLIF(r.mem_per_gpu_gb, 0)), 0))
                ELSE 0 END AS charged_gpus,
           j.elapsed_s * COALESCE(j.ncpus, 0) / 3600e0 AS core_hours,
           j.elapsed_s * COALESCE(j.ngpus, 0) / 3600e0 AS gpu_hours
    FROM lake_jobs j
    LEFT JOIN lake_config c         ON c.cluster = j.cluster
    LEFT JOIN lake_job_gpu_stats g  ON g.cluster = j.cluster AND g.job_id_raw = j.job_id_raw
    LEFT JOIN lake_job_mem_limit m  ON m.cluster = j.cluster AND m.job_id_raw = j.job_id_raw
    LEFT JOIN lake_job_rate r       ON r.cluster = j.cluster AND r.job_id_raw = j.job_id_raw
) charged
