-- The per-job metrics, written once in SQL that DuckDB and Spark SQL both run.
--
-- The files NN_lake_<view>.sql of sql/metrics/ are single SELECTs in the subset of SQL the two
-- engines share (rules: analytics/lake.py). Each engine makes each file a temporary view named
-- <view>, in file order, over four inputs:
--   lake_samples      the samples (the `samples` view's columns) plus time_ms, epoch milliseconds
--   lake_jobs         the jobs (the `jobs` view's columns)
--   lake_setting      the setting table with a cluster column: (cluster, name, value, text)
--   lake_charge_rate  the charging table with a cluster column
-- The database (analytics/store.py) maps them to the jobs of metric_scope and stores
-- lake_job_gpu_devices as job_gpu_devices and lake_job_metrics as job_metrics; the Parquet lake
-- (analytics/lake.py) maps them to its files, where `jobsight lake` and Spark query the views.
-- The DuckDB-only files after them (NN_job_*.sql) read the stored tables.

-- One row per cluster: the settings the metric SQL reads, as columns. There are no defaults here:
-- analytics/config.py writes every setting, and a cluster whose settings lack one gets no row, so
-- none of its jobs gets a result (store.py and lake.attach() refuse such settings by name first).
SELECT cluster, max_gap_s, gpu_idle_pct, charging_policy, charging_factor
FROM (
    SELECT cluster,
           max(CASE WHEN name = 'samples.max_gap_s' THEN value END)  AS max_gap_s,
           max(CASE WHEN name = 'flags.gpu_idle_pct' THEN value END) AS gpu_idle_pct,
           max(CASE WHEN name = 'charging.policy' THEN text END)     AS charging_policy,
           max(CASE WHEN name = 'charging.factor' THEN value END)    AS charging_factor
    FROM lake_setting
    GROUP BY cluster
) pivoted
WHERE max_gap_s IS NOT NULL AND gpu_idle_pct IS NOT NULL
  AND charging_policy IS NOT NULL AND charging_factor IS NOT NULL
