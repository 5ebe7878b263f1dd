-- calc_job_metrics (stored as job_metrics): one row per job with its efficiencies, what it was charged and what it wasted.
-- Formulas and where they follow seff / reportseff / jobstats: README, "Metrics".

CREATE OR REPLACE VIEW calc_job_gpu_stats AS
SELECT cluster, job_id_raw,
       any_value(source)                                AS gpu_source,
       count(*)                                         AS gpus_sampled,
       wmean(util_mean_pct, util_weight_s)              AS gpu_util_pct,
       min(util_mean_pct)                               AS gpu_util_min_device_pct,
       max(mem_peak_bytes * 100.0 / NULLIF(mem_total_bytes, 0)) AS gpu_mem_peak_pct,
       count(*) FILTER (WHERE util_mean_pct < setting_value('flags.gpu_idle_pct')) AS gpus_idle,
       sum(energy_j) / 3.6e6                            AS gpu_energy_kwh
FROM job_gpu_devices SEMI JOIN metric_scope USING (cluster, job_id_raw)
GROUP BY cluster, job_id_raw;

-- The job's CPU and memory as the sidecar saw them (its `cpu` rows): per host first, then summed
-- (memory) or time-weighted (CPU) over hosts, as jobstats does per node.
CREATE OR REPLACE VIEW calc_job_cpu_samples AS
WITH per_host AS (
    SELECT cluster, job_id_raw, host,
           wmean(util_pct, weight_s)                                 AS util_pct,
           sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END)     AS weight_s,
           max(mem_used_bytes)                                       AS mem_peak_bytes,
           max(mem_total_bytes)                                      AS mem_limit_bytes,
           count(*)                                                  AS n_samples,
           min(time) AS first_time, max(time) AS last_time
    FROM calc_sample_weighted
    WHERE device = 'cpu'
    GROUP BY cluster, job_id_raw, host
)
SELECT cluster, job_id_raw,
       count(*)                    AS hosts_sampled,
       wmean(util_pct, weight_s)   AS cpu_util_pct,
       sum(mem_peak_bytes)         AS mem_peak_bytes,
       sum(mem_limit_bytes)        AS mem_limit_bytes,
       sum(n_samples)              AS n_samples,
       min(first_time)             AS first_time,
       max(last_time)              AS last_time
FROM per_host
GROUP BY cluster, job_id_raw;

CREATE OR REPLACE VIEW calc_job_efficiency AS
SELECT j.* EXCLUDE (mem_peak_bytes),
    -- CPU: sacct's TotalCPU over the whole allocation (seff), else the sidecar's cgroup CPU.
    -- A TotalCPU of 0 with sidecar samples present is sacct -X or a killed step: trust the samples.
    CASE WHEN j.cpu_time_s IS NOT NULL AND (j.cpu_time_s > 0 OR c.cpu_util_pct IS NULL)
              AND j.elapsed_s > 0 AND j.ncpus > 0
         THEN j.cpu_time_s * 100.0 / (j.elapsed_s * j.ncpus)
         ELSE c.cpu_util_pct END                                        AS cpu_eff_pct,
    CASE WHEN j.cpu_time_s IS NOT NULL AND (j.cpu_time_s > 0 OR c.cpu_util_pct IS NULL)
              AND j.elapsed_s > 0 AND j.ncpus > 0 THEN 'sacct'
         WHEN c.cpu_util_pct IS NOT NULL THEN 'sidecar' END              AS cpu_eff_source,
    -- Memory: the sidecar's cgroup peak (all processes, page cache of the job included) beats
    -- sacct's sampled per-task RSS, which misses short peaks.
    COALESCE(c.mem_peak_bytes, j.mem_peak_bytes)                         AS mem_peak_bytes,
    CASE WHEN c.mem_peak_bytes IS NOT NULL THEN 'sidecar'
         WHEN j.mem_peak_bytes IS NOT NULL THEN 'sacct' END              AS mem_peak_source,
    j.mem_peak_bytes                                                     AS mem_peak_sacct_bytes,
    COALESCE(j.mem_alloc_bytes, j.mem_req_bytes, c.mem_limit_bytes)      AS mem_charged_bytes,
    COALESCE(c.mem_peak_bytes, j.mem_peak_bytes) * 100.0
        / NULLIF(COALESCE(j.mem_alloc_bytes, j.mem_req_bytes, c.mem_limit_bytes), 0) AS mem_eff_pct,
    j.elapsed_s * 100.0 / NULLIF(j.timelimit_s, 0)                       AS time_eff_pct,
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
             CASE WHEN j.ngpus > 0 AND j.gpu_util_tres < setting_value('flags.gpu_idle_pct') THEN j.ngpus END,
             0)                                                          AS idle_gpus,
    g.gpus_sampled,
    g.gpu_energy_kwh,
    j.elapsed_s * COALESCE(j.ncpus, 0) / 3600.0                          AS core_hours,
    j.elapsed_s * COALESCE(j.ngpus, 0) / 3600.0                          AS gpu_hours
FROM scope_jobs j
LEFT JOIN calc_job_cpu_samples c USING (cluster, job_id_raw)
LEFT JOIN calc_job_gpu_stats   g USING (cluster, job_id_raw);

-- The charge_rate row that applies to a job: its partition before '*', its GPU type before any.
CREATE OR REPLACE VIEW calc_job_rate AS
SELECT j.cluster, j.job_id_raw, r.* EXCLUDE ("partition", gpu_type)
FROM scope_jobs j
JOIN charge_rate r
  ON (r."partition" = j."partition" OR r."partition" = '*')
 AND (r.gpu_type IS NULL OR r.gpu_type = j.gpu_type)
QUALIFY row_number() OVER (PARTITION BY j.cluster, j.job_id_raw
                           ORDER BY (r."partition" = j."partition") DESC, (r.gpu_type IS NOT NULL) DESC) = 1;

CREATE OR REPLACE VIEW calc_job_metrics AS
WITH charged AS (
    SELECT e.*,
        COALESCE(e.mem_charged_bytes, 0) / 1073741824.0 AS mem_gib,
        r.per_core_h IS NOT NULL AS has_rate,
        r.per_core_h, r.per_gpu_h, r.per_gb_h,
        GREATEST(COALESCE(e.ncpus, 0), r.min_cores,
                 COALESCE(ceil(COALESCE(e.mem_charged_bytes, 0) / 1073741824.0 / r.mem_per_core_gb), 0)) AS charged_cores,
        CASE WHEN COALESCE(e.ngpus, 0) > 0 THEN
             GREATEST(e.ngpus, r.min_gpus,
                      COALESCE(ceil(COALESCE(e.ncpus, 0) / r.cores_per_gpu), 0),
                      COALESCE(ceil(COALESCE(e.mem_charged_bytes, 0) / 1073741824.0 / r.mem_per_gpu_gb), 0))
             ELSE 0 END AS charged_gpus,
        -- memory drove the charge when it bought more cores than were asked for
        r.mem_per_core_gb IS NOT NULL AND COALESCE(e.ngpus, 0) = 0
            AND ceil(COALESCE(e.mem_charged_bytes, 0) / 1073741824.0 / r.mem_per_core_gb)
                > GREATEST(COALESCE(e.ncpus, 0), r.min_cores) AS mem_drove_charge
    FROM calc_job_efficiency e
    LEFT JOIN calc_job_rate r USING (cluster, job_id_raw)
), priced AS (
    SELECT c.*,
        CASE WHEN setting_text('charging.policy') = 'slurm-billing' AND c.billing IS NOT NULL
                 THEN c.billing * c.elapsed_s / 3600.0 * setting_value('charging.factor')
             WHEN c.has_rate
                 THEN c.elapsed_s / 3600.0 * (c.charged_cores * c.per_core_h + c.charged_gpus * c.per_gpu_h
                                              + c.mem_gib * c.per_gb_h)
             ELSE c.core_hours END AS sbu,
        CASE WHEN setting_text('charging.policy') = 'slurm-billing' AND c.billing IS NOT NULL THEN 'billing'
             WHEN c.has_rate THEN 'table'
             ELSE 'core-hours' END AS sbu_source,
        CASE WHEN COALESCE(c.ngpus, 0) > 0 THEN 'gpu'
             WHEN c.mem_drove_charge THEN 'mem'
             ELSE 'cpu' END AS charge_driver
    FROM charged c
)
SELECT p.* EXCLUDE (has_rate, per_core_h, per_gpu_h, per_gb_h, mem_gib, mem_drove_charge),
    e.charge_eff_pct,
    -- wasted_sbu = sbu x (1 - efficiency of the resource that drove the charge, clamped to 0..100 %);
    -- NULL when that efficiency is unknown (GREATEST/LEAST skip NULLs, hence the explicit CASE).
    CASE WHEN e.charge_eff_pct IS NOT NULL
         THEN p.sbu * (1 - LEAST(GREATEST(e.charge_eff_pct, 0), 100) / 100.0) END AS wasted_sbu
FROM priced p,
LATERAL (SELECT CASE p.charge_driver WHEN 'gpu' THEN p.gpu_util_pct
                                     WHEN 'mem' THEN p.mem_eff_pct
                                     ELSE p.cpu_eff_pct END AS charge_eff_pct) e;
