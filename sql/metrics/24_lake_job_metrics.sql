-- lake_job_metrics (stored as job_metrics): one row per job with its efficiencies, what it was
-- charged and what it wasted. Formulas and where they follow seff / reportseff / jobstats:
-- docs/metrics.md.
--   sbu: policy slurm-billing and a billing TRES: billing x hours x charging.factor; else with a
--        charge rate: hours x (charged cores x per_core_h + charged GPUs x per_gpu_h + GiB x per_gb_h);
--        else core-hours.
--   wasted_sbu = sbu x (1 - efficiency of the resource that drove the charge, clamped to 0..100 %);
--        NULL when that efficiency is unknown.
-- GREATEST gets no NULL argument (no rate: 0), which equals DuckDB's and Spark's NULL-skipping
-- GREATEST for these non-negative counts, and keeps Trino (whose GREATEST returns NULL) right too.
SELECT p.cluster, p.job_id, p.job_id_raw, p.array_job_id, p.array_task_id, p.het_job_id, p.het_offset,
       p.job_name, p.user, p.uid, p.group, p.account, p.partition, p.qos, p.state, p.cancelled_by_uid,
       p.exit_code, p.submit_time, p.eligible_time, p.start_time, p.end_time, p.elapsed_s, p.timelimit_s,
       p.ncpus, p.nnodes, p.ntasks, p.ngpus, p.gpu_type, p.mem_req_bytes, p.mem_alloc_bytes,
       p.cpu_time_s, p.billing, p.alloc_tres, p.req_tres, p.gpu_util_tres, p.gpu_mem_tres_bytes,
       p.node_list, p.restarts, p.null_reasons, p.source,
       p.cpu_eff_pct, p.cpu_eff_source, p.mem_peak_bytes, p.mem_peak_source, p.mem_peak_sacct_bytes,
       p.mem_charged_bytes, p.mem_eff_pct, p.time_eff_pct, p.gpu_util_pct, p.gpu_util_source,
       p.gpu_util_min_device_pct, p.gpu_mem_peak_pct, p.gpus_idle, p.idle_gpus, p.gpus_sampled,
       p.gpu_energy_kwh, p.core_hours, p.gpu_hours,
       p.charged_cores, p.charged_gpus, p.sbu, p.sbu_source, p.charge_driver, p.charge_eff_pct,
       CASE WHEN p.charge_eff_pct IS NOT NULL
            THEN p.sbu * (1e0 - LEAST(GREATEST(p.charge_eff_pct, 0e0), 100e0) / 100e0) END AS wasted_sbu
FROM (
    SELECT priced.*,
           CASE priced.charge_driver WHEN 'gpu' THEN priced.gpu_util_pct
                                     WHEN 'mem' THEN priced.mem_eff_pct
                                     ELSE priced.cpu_eff_pct END AS charge_eff_pct
    FROM (
        SELECT charged.*,
            CASE WHEN charged.charging_policy = 'slurm-billing' AND charged.billing IS NOT NULL
                     THEN charged.billing * charged.elapsed_s / 3600e0 * charged.charging_factor
                 WHEN charged.per_core_h IS NOT NULL
                     THEN charged.elapsed_s / 3600e0 * (charged.charged_cores * charged.per_core_h
                                                        + charged.charged_gpus * charged.per_gpu_h
                                                        + charged.mem_gib * charged.per_gb_h)
                 ELSE charged.core_hours END AS sbu,
            CASE WHEN charged.charging_policy = 'slurm-billing' AND charged.billing IS NOT NULL THEN 'billing'
                 WHEN charged.per_core_h IS NOT NULL THEN 'table'
                 ELSE 'core-hours' END AS sbu_source,
            CASE WHEN COALESCE(charged.ngpus, 0) > 0 THEN 'gpu'
                 WHEN charged.mem_drove_charge THEN 'mem'
                 ELSE 'cpu' END AS charge_driver
        FROM (
            SELECT e.*, s.charging_policy, s.charging_factor, r.per_core_h, r.per_gpu_h, r.per_gb_h,
                COALESCE(e.mem_charged_bytes, 0) / 1073741824e0 AS mem_gib,
                GREATEST(COALESCE(e.ncpus, 0), COALESCE(r.min_cores, 0e0),
                         COALESCE(ceil(COALESCE(e.mem_charged_bytes, 0) / 1073741824e0
                                       / NULLIF(r.mem_per_core_gb, 0)), 0e0)) AS charged_cores,
                CASE WHEN COALESCE(e.ngpus, 0) > 0 THEN
                     GREATEST(e.ngpus, COALESCE(r.min_gpus, 0e0),
                              COALESCE(ceil(COALESCE(e.ncpus, 0) / NULLIF(r.cores_per_gpu, 0)), 0e0),
                              COALESCE(ceil(COALESCE(e.mem_charged_bytes, 0) / 1073741824e0
                                            / NULLIF(r.mem_per_gpu_gb, 0)), 0e0))
                     ELSE 0e0 END AS charged_gpus,
                -- memory drove the charge when it bought more cores than were asked for
                r.mem_per_core_gb IS NOT NULL AND COALESCE(e.ngpus, 0) = 0
                    AND ceil(COALESCE(e.mem_charged_bytes, 0) / 1073741824e0 / NULLIF(r.mem_per_core_gb, 0))
                        > GREATEST(COALESCE(e.ncpus, 0), COALESCE(r.min_cores, 0e0)) AS mem_drove_charge
            FROM lake_job_efficiency e
            JOIN lake_config s ON s.cluster = e.cluster
            LEFT JOIN lake_job_rate r ON r.cluster = e.cluster AND r.job_id_raw = e.job_id_raw
        ) charged
    ) priced
) p
