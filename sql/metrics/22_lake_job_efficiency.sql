-- Per job: its accounting record and its efficiencies. Every column of the `jobs` view but
-- mem_peak_bytes, which becomes the best peak known (below), in the view's order.
SELECT j.cluster, j.job_id, j.job_id_raw, j.array_job_id, j.array_task_id, j.het_job_id, j.het_offset,
       j.job_name, j.user, j.uid, j.group, j.account, j.partition, j.qos, j.state, j.cancelled_by_uid,
       j.exit_code, j.submit_time, j.eligible_time, j.start_time, j.end_time, j.elapsed_s, j.timelimit_s,
       j.ncpus, j.nnodes, j.ntasks, j.ngpus, j.gpu_type, j.mem_req_bytes, j.mem_alloc_bytes,
       j.cpu_time_s, j.billing, j.alloc_tres, j.req_tres, j.gpu_util_tres, j.gpu_mem_tres_bytes,
       j.node_list, j.restarts, j.null_reasons, j.source,
    -- CPU: sacct's TotalCPU over the whole allocation (seff), else the sidecar's cgroup CPU.
    -- A TotalCPU of 0 with sidecar samples present is sacct -X or a killed step: trust the samples.
    -- A running job's TotalCPU counts only its ended steps (0 while its batch step runs): only the
    -- samples tell its CPU use so far.
    CASE WHEN j.cpu_time_s IS NOT NULL AND (j.cpu_time_s > 0 OR c.cpu_util_pct IS NULL)
              AND j.elapsed_s > 0 AND j.ncpus > 0 AND COALESCE(j.state, '') NOT IN ('RUNNING', 'SUSPENDED')
         THEN j.cpu_time_s * 100e0 / NULLIF(j.elapsed_s * j.ncpus, 0)
         ELSE c.cpu_util_pct END                                        AS cpu_eff_pct,
    CASE WHEN j.cpu_time_s IS NOT NULL AND (j.cpu_time_s > 0 OR c.cpu_util_pct IS NULL)
              AND j.elapsed_s > 0 AND j.ncpus > 0 AND COALESCE(j.state, '') NOT IN ('RUNNING', 'SUSPENDED') THEN 'sacct'
         WHEN c.cpu_util_pct IS NOT NULL THEN 'sidecar' END              AS cpu_eff_source,
    -- Memory: the sidecar's cgroup peak (all processes, page cache of the job included) beats
    -- sacct's sampled per-task RSS, which misses short peaks.
    COALESCE(c.mem_peak_bytes, j.mem_peak_bytes)                         AS mem_peak_bytes,
    CASE WHEN c.mem_peak_bytes IS NOT NULL THEN 'sidecar'
         WHEN j.mem_peak_bytes IS NOT NULL THEN 'sacct' END              AS mem_peak_source,
    j.mem_peak_bytes                                                     AS mem_peak_sacct_bytes,
    COALESCE(j.mem_alloc_bytes, j.mem_req_bytes, c.mem_limit_bytes)      AS mem_charged_bytes,
    COALESCE(c.mem_peak_bytes, j.mem_peak_bytes) * 100e0
        / NULLIF(COALESCE(j.mem_alloc_bytes, j.mem_req_bytes, c.mem_limit_bytes), 0) AS mem_eff_pct,
    j.elapsed_s * 100e0 / NULLIF(j.timelimit_s, 0)                       AS time_eff_pct,
    -- GPU: samples (time-weighted over GPUs and samples), else Slurm's coarse gres/gpuutil.
    COALESCE(g.gpu_util_pct, CASE WHEN j.ngpus > 0 THEN j.gpu_util_tres END) AS gpu_util_pct,
    CASE WHEN g.gpu_util_pct IS NOT NULL THEN g.gpu_source
         WHEN j.ngpus > 0 AND j.gpu_util_tres IS NOT NULL THEN 'slurm-tres' END AS gpu_util_source,
    g.gpu_util_min_device_pct,
    g.gpu_mem_peak_pct,
    g.gpus_idle,
    -- GPUs counted idle in idle GPU-hours (reports, dashboard): per device from samples; where only
    -- Slurm's job-level gres/gpuutil is known, all of the job's GPUs when that mean is under
    -- flags.gpu_idle_pct (the gpu_idle flag's rule).
    COALESCE(g.gpus_idle,
             CASE WHEN j.ngpus > 0 AND j.gpu_util_tres < s.gpu_idle_pct THEN j.ngpus END,
             0)                                                          AS idle_gpus,
    g.gpus_sampled,
    g.gpu_energy_kwh,
    -- a job that ran on GPUs of an unknown count (its TRES or GPU type names GPUs, or its GPU
    -- count was unreadable: null_reasons names ngpus) has unknown GPU-hours, not 0
    CASE WHEN j.ngpus IS NULL AND j.elapsed_s > 0
              AND (j.gpu_type IS NOT NULL OR j.null_reasons LIKE '%ngpus%'
                   OR j.alloc_tres LIKE '%gres/gpu%' OR j.req_tres LIKE '%gres/gpu%') THEN NULL
         ELSE j.elapsed_s * COALESCE(j.ngpus, 0) / 3600e0 END            AS gpu_hours
FROM lake_jobs j
JOIN lake_config s ON s.cluster = j.cluster
LEFT JOIN lake_job_cpu_samples c ON c.cluster = j.cluster AND c.job_id_raw = j.job_id_raw
LEFT JOIN lake_job_gpu_stats   g ON g.cluster = j.cluster AND g.job_id_raw = j.job_id_raw
