-- Portable metric SQL (DuckDB and Spark SQL alike; see analytics/lake.py for the rules).
-- Each file is one SELECT; the runner makes it a temporary view named after the file.
-- The same numbers as sql/views (tests/test_lake.py checks them against job_metrics).

-- One row per cluster: the settings of its last export, as columns.
SELECT cluster,
       max(CASE WHEN name = 'samples.max_gap_s' THEN value END) AS max_gap_s,
       max(CASE WHEN name = 'flags.gpu_idle_pct' THEN value END) AS gpu_idle_pct,
       max(CASE WHEN name = 'charging.policy' THEN text END)    AS charging_policy,
       max(CASE WHEN name = 'charging.factor' THEN value END)   AS charging_factor
FROM lake_setting
GROUP BY cluster
