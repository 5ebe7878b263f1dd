-- Per-job results are stored (job_metrics, job_gpu_devices, job_flags, job_day), computed by the
-- views of sql/metrics/ for the jobs listed in metric_scope and kept current by analytics/store.py.
-- The stored tables themselves are made by the first refresh (their columns are the views'); the
-- metric views they replace go.
DROP VIEW IF EXISTS job_sbatch_advice;
DROP VIEW IF EXISTS job_flag_summary;
DROP VIEW IF EXISTS report_job_day;
DROP VIEW IF EXISTS usage_weekly;
DROP VIEW IF EXISTS usage_daily;
DROP VIEW IF EXISTS job_flags;
DROP VIEW IF EXISTS gpu_partitions;
DROP VIEW IF EXISTS job_metrics;
DROP VIEW IF EXISTS job_rate;
DROP VIEW IF EXISTS job_efficiency;
DROP VIEW IF EXISTS job_cpu_samples;
DROP VIEW IF EXISTS job_gpu_stats;
DROP VIEW IF EXISTS job_gpu_devices;
DROP VIEW IF EXISTS sample_weighted;
DROP MACRO TABLE IF EXISTS job_usage_by;
DROP MACRO IF EXISTS wmean;

-- The jobs a refresh computes (all of them after a change of settings or definitions), and the
-- jobs whose flags it recomputes (those, plus the jobs of partitions that gained or lost GPUs).
CREATE TABLE IF NOT EXISTS metric_scope (cluster VARCHAR NOT NULL, job_id_raw VARCHAR NOT NULL);
CREATE TABLE IF NOT EXISTS metric_flag_scope (cluster VARCHAR NOT NULL, job_id_raw VARCHAR NOT NULL);
-- The partitions the stored flags took as GPU partitions (cpu_job_on_gpu_partition).
CREATE TABLE IF NOT EXISTS metric_gpu_partitions (cluster VARCHAR, "partition" VARCHAR);

-- What the stored results were computed with: the checksum of sql/metrics/ and the settings
-- ('definitions'), the highest ingest_id they include ('ingest_watermark'), and what the last
-- refresh did ('last_refresh': full | incremental, with its job count).
CREATE TABLE IF NOT EXISTS metric_state (name VARCHAR NOT NULL, value VARCHAR);
