-- calc_job_flag_codes (stored as job_flag_codes): one row per (job, flag) with its severity and the
-- part of the request the flag resizes. Thresholds are `flags.*` settings (jobsight.toml [flags]); a
-- job with no data for a metric gets no flag for it ("unknown").
-- advised_*: the part of the request the flag resizes (NULL: none), the numbers its advice prints;
-- 45_job_advice.sql assembles them into the request that would have fit, which 46_job_savings.sql
-- prices. The places named (advised_partition) are jobsight.toml [advice].
-- The flags' messages and advice, text with the job's numbers, are formatted when read: the view
-- job_flags (sql/views/30_job_flags.sql) joins these rows to job_metrics. A rebuild after a change of
-- thresholds then writes no text for a million jobs.
-- DuckDB only (macros, row constructors): it reads the stored job_metrics and job_day of the jobs in
-- metric_flag_scope (flag_scoped_*: the TEMP views of analytics/store.py SCOPED).

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
-- of the minutes within a day, not printf: a rebuild formats one per advised job).
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

CREATE OR REPLACE VIEW calc_job_flag_codes AS
WITH m AS (
    SELECT *,
        elapsed_s >= setting_value('flags.min_runtime_s') AS long_enough,
        -- a job still running (its elapsed, charge and utilisation are so far): the flags on its
        -- peak memory, which may still grow, and on its time, wait for its end
        COALESCE(state IN ('RUNNING', 'SUSPENDED'), false) AS running,
        cpu_eff_pct * ncpus / 100.0 AS cores_used,
        -- the request that fits (the headroom rules, docs/metrics.md#the-request-that-would-have-fit):
        -- the cores busy on average, rounded up; the GPUs in use; peak memory x mem_headroom per
        -- node in whole GiB (--mem is per node); elapsed x time_headroom in whole minutes
        GREATEST(1, CAST(ceil(cpu_eff_pct * ncpus / 100.0) AS BIGINT)) AS fit_ncpus,
        GREATEST(ngpus - gpus_idle, 1) AS fit_ngpus,
        CASE WHEN mem_peak_bytes IS NOT NULL
             THEN CAST(GREATEST(1, ceil(gib(mem_peak_bytes) * setting_value('flags.mem_headroom')
                                        / GREATEST(COALESCE(nnodes, 1), 1))) AS BIGINT) END AS fit_mem_gib,
        CAST(ceil(elapsed_s * setting_value('flags.time_headroom') / 60.0) AS BIGINT) * 60 AS fit_time_s,
        NULLIF(setting_text('advice.cpu_partition'), '') AS cpu_partition
    FROM flag_scoped_job_metrics
    -- first_day / last_day: the first and last day the job ran (job_day; NULL when it never ran), so
    -- that the flags of the jobs that ran in a period are found without reading job_day
    LEFT JOIN (SELECT cluster, job_id_raw, min(day) AS first_day, max(day) AS last_day
               FROM flag_scoped_job_day GROUP BY ALL) r
        USING (cluster, job_id_raw)
    WHERE state IS DISTINCT FROM 'PENDING'
), f AS (
    SELECT m.*, 'gpu_idle' AS code, 'alarm' AS severity,
        NULLIF(cpu_partition, "partition") AS advised_partition, CAST(NULL AS BIGINT) AS advised_ncpus,
        CAST(NULL AS BIGINT) AS advised_mem_bytes, CAST(0 AS BIGINT) AS advised_ngpus, CAST(NULL AS BIGINT) AS advised_timelimit_s
    FROM m WHERE long_enough AND ngpus > 0 AND gpu_util_pct < setting_value('flags.gpu_idle_pct')
    UNION ALL
    SELECT m.*, 'gpu_low_util',
        CASE WHEN gpu_util_pct < setting_value('flags.gpu_low_util_alarm_pct') THEN 'alarm' ELSE 'warn' END,
        NULL, NULL, NULL, NULL, NULL
    FROM m WHERE long_enough AND ngpus > 0
        AND gpu_util_pct >= setting_value('flags.gpu_idle_pct')
        AND gpu_util_pct < setting_value('flags.gpu_low_util_pct')
    UNION ALL
    SELECT m.*, 'gpu_unused_devices', 'alarm', NULL, NULL, NULL, fit_ngpus, NULL
    FROM m WHERE long_enough AND ngpus > 1 AND gpus_idle >= 1
    UNION ALL
    SELECT m.*, 'gpu_fits_smaller', 'info',
        NULLIF(NULLIF(setting_text('advice.small_gpu_partition'), ''), "partition"), NULL, NULL, NULL, NULL
    FROM m WHERE long_enough AND NOT running AND ngpus > 0
        AND gpu_mem_peak_pct < setting_value('flags.gpu_fits_smaller_mem_pct')
        AND gpu_util_pct < setting_value('flags.gpu_fits_smaller_util_pct')
    UNION ALL
    SELECT m.*, 'cpu_low_eff',
        CASE WHEN cpu_eff_pct < setting_value('flags.cpu_low_eff_alarm_pct') THEN 'alarm' ELSE 'warn' END,
        NULL, CASE WHEN ncpus > 1 THEN fit_ncpus END, NULL, NULL, NULL
    FROM m WHERE long_enough AND COALESCE(ngpus, 0) = 0
        AND cpu_eff_pct < setting_value('flags.cpu_low_eff_pct')
    UNION ALL
    SELECT m.*, 'cpu_serial_on_many', 'alarm', NULL, 1, NULL, NULL, NULL
    FROM m WHERE long_enough AND ncpus >= setting_value('flags.cpu_serial_min_cores')
        AND cores_used BETWEEN setting_value('flags.cpu_serial_used_min')
                           AND setting_value('flags.cpu_serial_used_max')
    UNION ALL
    SELECT m.*, 'mem_oversized', 'warn',
        NULL, NULL, fit_mem_gib * GREATEST(COALESCE(nnodes, 1), 1) * 1073741824, NULL, NULL
    FROM m WHERE long_enough AND NOT running
        AND mem_eff_pct < setting_value('flags.mem_oversized_pct')
        AND gib(mem_charged_bytes - mem_peak_bytes) >= setting_value('flags.mem_oversized_min_unused_gib')
    UNION ALL
    SELECT m.*, 'time_oversized', 'warn', NULL, NULL, NULL, NULL, fit_time_s
    FROM m WHERE long_enough AND state = 'COMPLETED'
        AND time_eff_pct < setting_value('flags.time_oversized_pct')
    UNION ALL
    SELECT m.*, 'cpu_job_on_gpu_partition', 'warn', NULLIF(cpu_partition, "partition"), NULL, NULL, NULL, NULL
    FROM m WHERE COALESCE(ngpus, 0) = 0
        AND (cluster, "partition") IN (SELECT (cluster, "partition") FROM metric_gpu_partitions)
    UNION ALL
    -- a job on a fat-memory partition whose memory fits a node of the thin one; whether it costs
    -- less there is for 46_job_savings.sql to say (it prices both)
    SELECT m.*, 'mem_fits_thin', 'info',
        setting_text('advice.mem_partition'), NULL, fit_mem_gib * GREATEST(COALESCE(nnodes, 1), 1) * 1073741824, NULL, NULL
    FROM m WHERE long_enough AND NOT running AND COALESCE(ngpus, 0) = 0 AND mem_peak_bytes IS NOT NULL
        AND list_contains(string_split(setting_text('advice.fat_partitions'), ','), "partition")
        AND setting_text('advice.mem_partition') NOT IN ('', "partition")
        AND fit_mem_gib <= setting_value('advice.mem_partition_node_gib')
    UNION ALL
    SELECT m.*, 'failed_burn', CASE WHEN sbu >= setting_value('flags.failed_burn_alarm_sbu') THEN 'alarm' ELSE 'info' END,
        NULL, NULL, NULL, NULL, NULL
    FROM m WHERE state IN ('FAILED', 'TIMEOUT', 'OUT_OF_MEMORY', 'NODE_FAIL') AND sbu > 0
)
SELECT f.cluster, f.job_id_raw, f.code, f.severity, f.first_day, f.last_day,
       f.advised_partition, f.advised_ncpus, f.advised_mem_bytes, f.advised_ngpus, f.advised_timelimit_s
FROM f;
