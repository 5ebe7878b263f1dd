-- calc_job_flags (stored as job_flags): one row per (job, flag) with severity, a message carrying the job's numbers and the
-- concrete advice (the #SBATCH request that would have fit). Thresholds are `flags.*` settings
-- (jobsight.toml [flags]); a job with no data for a metric gets no flag for it ("unknown").
-- advised_*: the part of the request the flag resizes (NULL: none), the same numbers its advice
-- prints; 45_job_advice.sql assembles them into the request that would have fit, which
-- 46_job_savings.sql prices. The places named (advised_partition) are jobsight.toml [advice].
-- A job's advice, in order (advice_order 1 leads; rules: docs/metrics.md#which-advice-leads):
--   1. the flags on the resource that drove its charge (job_metrics.charge_driver), whose
--      efficiency its wasted SBU is (25_lake_job_metrics.sql): they drive the waste;
--   2. other advice that lowers the charge (lowers_charge);
--   3. failed_burn's (it makes the job work);
--   4. advice that lowers no charge (a shorter --time; less --mem where memory is not charged;
--      fewer cores while memory buys them), which says so and what it buys instead;
--   within each, alarm before warn before info, then the code.
-- Contradicting advice is never given together, by the waste: an idle GPU job is told to drop the
-- GPU, not to use fewer or smaller ones; a job that ran out of memory gets no advice to ask for
-- less; a job that timed out mostly idle is not told to ask for more time.
-- DuckDB only (printf, macros, row constructors): it reads the stored job_metrics and job_day of the
-- jobs in metric_flag_scope (flag_scoped_*: the TEMP views of analytics/store.py SCOPED).

-- A setting from jobsight.toml (analytics/config.py writes every one, defaults included, each time a
-- command opens the database read-write). The defaults live only there: a missing setting is an
-- error, never a silent fallback.
CREATE OR REPLACE MACRO setting_value(n) AS (
    SELECT CASE WHEN count(*) = 1 AND max(value) IS NOT NULL THEN max(value)
                ELSE error('jobsight: setting ' || n || ' is not in the setting table; open the database read-write with this jobsight') END
    FROM setting WHERE name = n);
CREATE OR REPLACE MACRO setting_text(n) AS (
    SELECT CASE WHEN count(*) = 1 AND max(text) IS NOT NULL THEN max(text)
                ELSE error('jobsight: setting ' || n || ' is not in the setting table; open the database read-write with this jobsight') END
    FROM setting WHERE name = n);

CREATE OR REPLACE MACRO gib(b) AS b / 1073741824.0;
-- Slurm --time value for a number of seconds, rounded up to whole minutes: [D-]HH:MM:00 (strftime
-- of the minutes within a day, not printf: a full rebuild formats two million of them).
CREATE OR REPLACE MACRO slurm_minutes(m) AS
    CASE WHEN m >= 1440 THEN CAST(m // 1440 AS VARCHAR) || '-' ELSE '' END
    || strftime(TIMESTAMP '2000-01-01' + to_minutes(m % 1440), '%H:%M:%S');
CREATE OR REPLACE MACRO slurm_time(s) AS slurm_minutes(CAST(ceil(s / 60.0) AS BIGINT));

-- Partitions that hold GPUs: a GPU job ran there, or the charging table prices GPUs there. It spans
-- jobs, so analytics/store.py refreshes the flags of a partition's jobs when this set changes.
CREATE OR REPLACE VIEW calc_gpu_partitions AS
SELECT DISTINCT cluster, "partition" FROM jobs WHERE ngpus > 0 AND "partition" IS NOT NULL
UNION
SELECT DISTINCT j.cluster, j."partition" FROM jobs j JOIN charge_rate r ON r."partition" = j."partition" WHERE r.per_gpu_h > 0;

-- TRESBillingWeights per partition of the scope's clusters, from the best source that has the
-- partition (billing_weight: config, then file, then scontrol), as one struct per partition:
-- cpu, mem per GiB, node, gres/gpu, typed GPUs [{t, w}], and whether any other TRES is weighed.
CREATE OR REPLACE VIEW calc_partition_weights AS
WITH w AS (
    SELECT c.cluster, b."partition", b.tres, b.weight,
           rank() OVER (PARTITION BY c.cluster, b."partition"
                        ORDER BY CASE b.source WHEN 'config' THEN 1 WHEN 'file' THEN 2 ELSE 3 END) AS pick
    FROM (SELECT DISTINCT cluster FROM metric_flag_scope) c
    JOIN billing_weight b ON b.cluster IS NULL OR b.cluster = c.cluster
)
SELECT cluster, "partition",
       {'cpu': COALESCE(sum(weight) FILTER (WHERE tres = 'cpu'), 0),
        'mem_gib': COALESCE(sum(weight) FILTER (WHERE tres = 'mem'), 0),
        'node': COALESCE(sum(weight) FILTER (WHERE tres = 'node'), 0),
        'gpu': COALESCE(sum(weight) FILTER (WHERE tres = 'gres/gpu'), 0),
        'typed': list({'t': substr(tres, 10), 'w': weight}) FILTER (WHERE tres LIKE 'gres/gpu:%'),
        'other': bool_or(NOT (tres IN ('cpu', 'mem', 'node', 'gres/gpu') OR tres LIKE 'gres/gpu:%'))} AS weights
FROM w WHERE pick = 1
GROUP BY ALL;

-- Whether memory has a price in a job's charge (so that less --mem lowers it): memory drove the
-- charge (it bought more cores than were asked for), the charging table's rate of its partition
-- (before '*') prices GiB-hours, or, for a job charged its Slurm billing, its partition's
-- TRESBillingWeights weigh Mem.
CREATE OR REPLACE VIEW calc_flag_mem_rates AS
SELECT "partition", max(per_gb_h) > 0 AS mem_priced FROM charge_rate GROUP BY ALL;

CREATE OR REPLACE MACRO mem_is_charged(charge_driver, sbu_source, weight, rate) AS
    charge_driver = 'mem' OR CASE sbu_source WHEN 'billing' THEN COALESCE(weight > 0, false)
                                             WHEN 'table' THEN COALESCE(rate, false) ELSE false END;

-- What advice that lowers no charge says instead (it follows the option it is about).
CREATE OR REPLACE MACRO mem_not_charged() AS
    ': saves no SBU (memory is not charged here); it starts sooner and leaves memory for others';
CREATE OR REPLACE MACRO cores_bought_by_mem() AS
    '; saves no SBU while the memory asked for buys the cores (see --mem)';

CREATE OR REPLACE VIEW calc_job_flags AS
WITH m AS (
    SELECT *,
        -- its GPUs sat idle (the gpu_idle flag): it is told to drop them, so not also to use fewer or
        -- smaller ones (gpu_unused_devices, gpu_fits_smaller)
        COALESCE(long_enough AND ngpus > 0 AND gpu_util_pct < setting_value('flags.gpu_idle_pct'), false) AS gpus_dropped,
        -- a job still running (its elapsed, charge and utilisation are so far): the flags on its
        -- peak memory, which may still grow, and on its time, wait for its end
        COALESCE(state IN ('RUNNING', 'SUSPENDED'), false) AS running,
        cpu_eff_pct * ncpus / 100.0 AS cores_used,
        -- the request that fits (the headroom rules, docs/metrics.md#the-request-that-would-have-fit):
        -- the cores busy on average, rounded up; the GPUs in use; the peak memory of a node x
        -- mem_headroom in whole GiB (--mem is per node); elapsed x time_headroom in whole minutes
        GREATEST(1, CAST(ceil(cpu_eff_pct * ncpus / 100.0) AS BIGINT)) AS fit_ncpus,
        GREATEST(ngpus - gpus_idle, 1) AS fit_ngpus,
        CASE WHEN mem_peak_bytes IS NOT NULL
             THEN CAST(GREATEST(1, ceil(gib(node_peak_bytes) * setting_value('flags.mem_headroom'))) AS BIGINT) END AS fit_mem_gib,
        CAST(ceil(elapsed_s * setting_value('flags.time_headroom') / 60.0) AS BIGINT) * 60 AS fit_time_s,
        NULLIF(setting_text('advice.cpu_partition'), '') AS cpu_partition,
        CASE WHEN nodes > 1 THEN ' per node' ELSE '' END AS per_node,
        -- a GPU utilisation known only as the job's whole (Slurm's gres/gpuutil, seff's GPU lines)
        gpu_util_source IS NOT DISTINCT FROM 'slurm-tres' AS job_level_gpu,
        -- it spent its time mostly idle (the alarm level of the resource it was charged for): a
        -- TIMEOUT is not told to ask for more time
        CASE WHEN COALESCE(ngpus, 0) > 0 THEN gpu_util_pct < setting_value('flags.gpu_low_util_alarm_pct')
             ELSE cpu_eff_pct < setting_value('flags.cpu_low_eff_alarm_pct') END AS mostly_idle
    FROM (
        SELECT j.*, j.elapsed_s >= setting_value('flags.min_runtime_s') AS long_enough, GREATEST(COALESCE(j.nnodes, 1), 1) AS nodes,
               -- the peak of the fullest node: the job's peak shared evenly among its nodes, or the
               -- largest per-host peak the sidecar saw, whichever is more (never below either)
               GREATEST(j.mem_peak_bytes / GREATEST(COALESCE(j.nnodes, 1), 1), h.host_peak_bytes) AS node_peak_bytes,
               h.host_peak_bytes
        FROM flag_scoped_job_metrics j
        LEFT JOIN (SELECT cluster, job_id_raw, max(mem_peak_bytes) AS host_peak_bytes
                   FROM job_cpu_hosts SEMI JOIN (SELECT cluster, job_id_raw FROM flag_scoped_job_metrics WHERE nnodes > 1)
                        USING (cluster, job_id_raw)
                   GROUP BY ALL) h USING (cluster, job_id_raw)
    ) j
    -- first_day / last_day: the first and last day the job ran (job_day; NULL when it never ran), so
    -- that the flags of the jobs that ran in a period are found without reading job_day
    LEFT JOIN (SELECT cluster, job_id_raw, min(day) AS first_day, max(day) AS last_day
               FROM flag_scoped_job_day GROUP BY ALL) r
        USING (cluster, job_id_raw)
    WHERE state IS DISTINCT FROM 'PENDING'
), part_mem AS (
    -- per partition of the scope: its TRESBillingWeights' Mem weight, and whether its charging
    -- table rate (before '*') prices memory (read by the memory flags only)
    SELECT k.cluster, k."partition", w.weights.mem_gib AS mem_weight, COALESCE(r.mem_priced, s.mem_priced) AS mem_rate
    FROM (SELECT DISTINCT cluster, "partition" FROM flag_scoped_job_metrics) k
    LEFT JOIN calc_partition_weights w ON w.cluster = k.cluster AND w."partition" = k."partition"
    LEFT JOIN calc_flag_mem_rates r ON r."partition" = k."partition"
    LEFT JOIN (SELECT mem_priced FROM calc_flag_mem_rates WHERE "partition" = '*') s ON true
), f AS (
    SELECT m.*, 'gpu_idle' AS code, 'alarm' AS severity,
        CASE WHEN job_level_gpu
             THEN printf('Job-level GPU utilisation %.1f%% (Slurm''s gres/gpuutil, not per GPU) on %d GPU(s) for %.1f h: %.1f SBU burned on idle GPUs',
                         gpu_util_pct, ngpus, elapsed_s / 3600.0, sbu)
             ELSE printf('%d GPU(s) at %.1f%% mean utilisation for %.1f h: %.1f SBU burned on idle GPUs',
                         ngpus, gpu_util_pct, elapsed_s / 3600.0, sbu) END AS message,
        'Check that the code really uses the GPU (e.g. torch.cuda.is_available()); for interactive work request a GPU only while you need it, or drop it (--gres=none'
            || COALESCE(' --partition=' || NULLIF(cpu_partition, "partition"), '') || ')' AS advice,
        NULLIF(cpu_partition, "partition") AS advised_partition, CAST(NULL AS BIGINT) AS advised_ncpus,
        CAST(NULL AS BIGINT) AS advised_mem_bytes, CAST(0 AS BIGINT) AS advised_ngpus, CAST(NULL AS BIGINT) AS advised_timelimit_s,
        'gpu' AS resource, true AS lowers_charge
    FROM m WHERE gpus_dropped
    UNION ALL
    SELECT m.*, 'gpu_low_util',
        CASE WHEN gpu_util_pct < setting_value('flags.gpu_low_util_alarm_pct') THEN 'alarm' ELSE 'warn' END,
        CASE WHEN job_level_gpu
             THEN printf('Job-level GPU utilisation %.1f%% (Slurm''s gres/gpuutil for its %d GPU(s), not per GPU); %.1f of %.1f SBU wasted',
                         gpu_util_pct, ngpus, wasted_sbu, sbu)
             ELSE printf('GPU utilisation %.1f%% (mean over %d GPU(s)); %.1f of %.1f SBU wasted', gpu_util_pct, ngpus, wasted_sbu, sbu) END,
        'Feed the GPU faster: more DataLoader workers (--cpus-per-task), pinned memory, larger batches; profile with the sidecar time series',
        NULL, NULL, NULL, NULL, NULL, 'gpu', true
    FROM m WHERE long_enough AND ngpus > 0
        AND gpu_util_pct >= setting_value('flags.gpu_idle_pct')
        AND gpu_util_pct < setting_value('flags.gpu_low_util_pct')
    UNION ALL
    SELECT m.*, 'gpu_unused_devices', 'alarm',
        printf('%d of %d GPUs idle (least-used GPU at %.1f%%)', gpus_idle, ngpus, gpu_util_min_device_pct),
        printf('--gres=gpu:%d (or make the code use all GPUs: DistributedDataParallel, one task per GPU)', fit_ngpus),
        NULL, NULL, NULL, fit_ngpus, NULL, 'gpu', true
    FROM m WHERE long_enough AND ngpus > 1 AND gpus_idle >= 1 AND NOT gpus_dropped
    UNION ALL
    SELECT m.*, 'gpu_fits_smaller', 'info',
        printf('Peak GPU memory %.1f%% of the device and %.1f%% utilisation', gpu_mem_peak_pct, gpu_util_pct),
        COALESCE('--partition=' || NULLIF(NULLIF(setting_text('advice.small_gpu_partition'), ''), "partition")
                 || ': a MIG slice or a smaller GPU would do',
                 'A MIG slice or a smaller GPU would do: ask for the smallest GPU type your site offers'),
        NULLIF(NULLIF(setting_text('advice.small_gpu_partition'), ''), "partition"), NULL, NULL, NULL, NULL, 'gpu', true
    FROM m WHERE long_enough AND NOT running AND ngpus > 0 AND NOT gpus_dropped
        AND gpu_mem_peak_pct < setting_value('flags.gpu_fits_smaller_mem_pct')
        AND gpu_util_pct < setting_value('flags.gpu_fits_smaller_util_pct')
    UNION ALL
    SELECT m.*, 'cpu_low_eff',
        CASE WHEN cpu_eff_pct < setting_value('flags.cpu_low_eff_alarm_pct') THEN 'alarm' ELSE 'warn' END,
        printf('CPU efficiency %.1f%%: %.1f of %d cores busy on average', cpu_eff_pct, cores_used, ncpus),
        CASE WHEN ncpus > 1
             THEN printf('--cpus-per-task=%d (or --ntasks), or make the code use the cores it asks for', fit_ncpus)
                  || CASE WHEN charge_driver = 'mem' THEN cores_bought_by_mem() ELSE '' END
             ELSE 'The one core waited most of the time: check for I/O waits, sleeps or lock contention' END,
        NULL, CASE WHEN ncpus > 1 THEN fit_ncpus END, NULL, NULL, NULL, 'cpu', charge_driver IS DISTINCT FROM 'mem'
    FROM m WHERE long_enough AND COALESCE(ngpus, 0) = 0
        AND cpu_eff_pct < setting_value('flags.cpu_low_eff_pct')
    UNION ALL
    SELECT m.*, 'cpu_serial_on_many', 'alarm',
        printf('About one core busy (%.2f) of %d allocated: serial code on many cores', cores_used, ncpus),
        '--ntasks=1 --cpus-per-task=1, or parallelise the code (threads, MPI, multiprocessing)'
            || CASE WHEN charge_driver = 'mem' THEN cores_bought_by_mem() ELSE '' END,
        NULL, 1, NULL, NULL, NULL, 'cpu', charge_driver IS DISTINCT FROM 'mem'
    FROM m WHERE long_enough AND ncpus >= setting_value('flags.cpu_serial_min_cores')
        AND cores_used BETWEEN setting_value('flags.cpu_serial_used_min')
                           AND setting_value('flags.cpu_serial_used_max')
    UNION ALL
    SELECT m.*, 'mem_oversized', 'warn',
        printf('Peak memory %.1f GiB of %.1f GiB allocated (%.1f%%)', gib(mem_peak_bytes), gib(mem_charged_bytes), mem_eff_pct)
            || CASE WHEN nodes > 1 THEN printf(' on %d nodes: %.1f GiB on the fullest', nodes, gib(node_peak_bytes)) ELSE '' END,
        '--mem=' || fit_mem_gib || 'G' || per_node
            || CASE WHEN NOT mem_is_charged(charge_driver, sbu_source, pm.mem_weight, pm.mem_rate) THEN mem_not_charged() ELSE '' END,
        NULL, NULL, fit_mem_gib * nodes * 1073741824, NULL, NULL, 'mem', mem_is_charged(charge_driver, sbu_source, pm.mem_weight, pm.mem_rate)
    FROM m LEFT JOIN part_mem pm ON pm.cluster = m.cluster AND pm."partition" IS NOT DISTINCT FROM m."partition"
    WHERE long_enough AND NOT running AND state IS DISTINCT FROM 'OUT_OF_MEMORY'
        AND mem_eff_pct < setting_value('flags.mem_oversized_pct')
        AND gib(mem_charged_bytes - mem_peak_bytes) >= setting_value('flags.mem_oversized_min_unused_gib')
    UNION ALL
    SELECT m.*, 'time_oversized', 'warn',
        printf('Ran %s of a %s limit (%.1f%%)', slurm_time(elapsed_s), slurm_time(timelimit_s), time_eff_pct),
        '--time=' || slurm_time(fit_time_s) || ': saves no SBU (the time run is charged, not the limit); a shorter limit starts sooner through backfill',
        NULL, NULL, NULL, NULL, fit_time_s, 'time', false
    FROM m WHERE long_enough AND state = 'COMPLETED'
        AND time_eff_pct < setting_value('flags.time_oversized_pct')
    UNION ALL
    SELECT m.*, 'cpu_job_on_gpu_partition', 'warn',
        printf('No GPU requested on GPU partition %s', "partition"),
        COALESCE('--partition=' || NULLIF(cpu_partition, "partition") || ': submit CPU-only work to a CPU partition',
                 'Submit CPU-only work to a CPU partition'),
        NULLIF(cpu_partition, "partition"), NULL, NULL, NULL, NULL, 'partition', true
    FROM m WHERE COALESCE(ngpus, 0) = 0
        AND (cluster, "partition") IN (SELECT (cluster, "partition") FROM metric_gpu_partitions)
    UNION ALL
    -- a job on a fat-memory partition whose memory fits a node of the thin one; whether it costs
    -- less there is for 46_job_savings.sql to say (it prices both)
    SELECT m.*, 'mem_fits_thin', 'info',
        printf('Peak memory %.1f GiB per node fits a %s node (%s GiB)', gib(node_peak_bytes),
               setting_text('advice.mem_partition'), CAST(setting_value('advice.mem_partition_node_gib') AS VARCHAR)),
        '--partition=' || setting_text('advice.mem_partition') || ' --mem=' || fit_mem_gib || 'G' || per_node || ', where that costs less',
        setting_text('advice.mem_partition'), NULL, fit_mem_gib * nodes * 1073741824, NULL, NULL, 'mem', true
    FROM m WHERE long_enough AND NOT running AND state IS DISTINCT FROM 'OUT_OF_MEMORY' AND COALESCE(ngpus, 0) = 0 AND mem_peak_bytes IS NOT NULL
        AND list_contains(string_split(setting_text('advice.fat_partitions'), ','), "partition")
        AND setting_text('advice.mem_partition') NOT IN ('', "partition")
        AND fit_mem_gib <= setting_value('advice.mem_partition_node_gib')
    UNION ALL
    SELECT m.*, 'failed_burn', CASE WHEN sbu >= setting_value('flags.failed_burn_alarm_sbu') THEN 'alarm' ELSE 'info' END,
        printf('%s (exit %s) after %.1f h: %.1f SBU burned', state, COALESCE(exit_code, '?'), elapsed_s / 3600.0, sbu),
        CASE state WHEN 'OUT_OF_MEMORY'
                        THEN '--mem=' || CAST(ceil(gib(GREATEST(COALESCE(mem_peak_bytes, 0), COALESCE(mem_charged_bytes, 0))) / nodes * 1.5) AS BIGINT)
                             || 'G' || per_node || ', or reduce the memory the code holds'
                   WHEN 'TIMEOUT' THEN CASE WHEN mostly_idle THEN 'Checkpoint and restart; it timed out mostly idle, so more time is not the fix'
                                            ELSE 'Checkpoint and restart, or a longer --time' END
                   WHEN 'NODE_FAIL' THEN 'Node failure: resubmit; ask support about a refund'
                   ELSE 'Test on a short job (--time=00:10:00) before long runs' END,
        NULL, NULL, NULL, NULL, NULL, 'failure', false
    FROM m WHERE state IN ('FAILED', 'TIMEOUT', 'OUT_OF_MEMORY', 'NODE_FAIL') AND sbu > 0
), ranked AS (
    -- the stored columns only (the window sorts these, not every column of job_metrics), and the
    -- advice's place: its group (the header's list) x 10 + its severity
    SELECT f.cluster, f.job_id_raw, f.job_id, f.job_name, f."user", f.account, f."partition", f.state, f.start_time,
           f.end_time, f.elapsed_s, f.sbu, f.wasted_sbu, f.code, f.severity, f.message, f.advice, f.first_day, f.last_day,
           f.advised_partition, f.advised_ncpus, f.advised_mem_bytes, f.advised_ngpus, f.advised_timelimit_s,
           f.lowers_charge,
           10 * CASE WHEN f.resource = f.charge_driver AND f.lowers_charge THEN 1
                     WHEN f.lowers_charge THEN 2
                     WHEN f.code = 'failed_burn' THEN 3
                     ELSE 4 END
              + CASE f.severity WHEN 'alarm' THEN 1 WHEN 'warn' THEN 2 ELSE 3 END AS advice_key
    FROM f
)
SELECT * EXCLUDE (advice_key),
       CAST(row_number() OVER (PARTITION BY cluster, job_id_raw ORDER BY advice_key, code) AS INTEGER) AS advice_order
FROM ranked;
