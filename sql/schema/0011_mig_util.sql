-- A MIG instance has no NVML utilisation: its GPM SM activity is its utilisation. The sidecar
-- writes it as util_pct; files whose MIG rows carry it only in sm_active_pct (older sidecars, other
-- collectors) read the same through this rule, the one every reader of samples goes through: the
-- `samples` view (the stored metrics' input, the lake's export, the job page, Running now) and the
-- held samples of sample_pending (analytics/job_samples.py).
CREATE OR REPLACE MACRO sample_util_pct(util_pct, device, sm_active_pct) AS
    CASE WHEN util_pct IS NULL AND device LIKE 'MIG-%' THEN sm_active_pct ELSE util_pct END;

CREATE OR REPLACE VIEW samples AS
SELECT cluster, job_id_raw, host, device, time, sample_util_pct(util_pct, device, sm_active_pct) AS util_pct,
       mem_used_bytes, mem_total_bytes, gpu_index, power_w, energy_j, sm_clock_mhz, temperature_c,
       sm_active_pct, source
FROM sample;
