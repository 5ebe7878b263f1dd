-- lake_job_metrics (stored as job_metrics): one row per job with its efficiencies, what it was
-- charged (lake_job_charge) and what it wasted. Formulas and where they follow seff / reportseff /
-- jobstats: docs/metrics.md.
--   wasted_sbu = sbu x (1 - efficiency of the resource that drove the charge, clamped to 0..100 %);
--        NULL when that efficiency is unknown.
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
    SELECT driven.*,
           CASE driven.charge_driver WHEN 'gpu' THEN driven.gpu_util_pct
                                     WHEN 'mem' THEN driven.mem_eff_pct
                                     ELSE driven.cpu_eff_pct END AS charge_eff_pct
    FROM (
        SELECT c.*,
            CASE WHEN COALESCE(c.ngpus, 0) > 0 THEN 'gpu'
                 WHEN c.mem_drove_charge THEN 'mem'
                 ELSE 'cpu' END AS charge_driver
        FROM lake_job_charge c
    ) driven
) p
