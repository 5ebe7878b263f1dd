-- What the dashboard server's /metrics serves in the Prometheus text format
-- (dashboard/prometheus.py only formats these rows). `as_of` is the scrape's time, a UTC
-- TIMESTAMP; with plain DuckDB:  SELECT * FROM prometheus_usage(now() AT TIME ZONE 'UTC');
-- A NULL account or partition is the empty label value, one group with a blank one.

-- SBU burned, wasted and what following the advice would have saved, per cluster, account and
-- partition, over the 7 and 30 UTC days up to as_of's day (that day so far included), from the
-- stored per-day summaries (dash_day): the day split of `jobsight usage --since D-6 --until D`.
-- A day that has no row adds nothing; a sum over only unknown values is NULL (no sample).
CREATE OR REPLACE MACRO prometheus_usage(as_of) AS TABLE
WITH w AS (
    SELECT "window", days, date_trunc('day', CAST(as_of AS TIMESTAMP)) AS last_day
    FROM (VALUES ('7d', 7), ('30d', 30)) t("window", days)
)
SELECT d.cluster, coalesce(d.account, '') AS account, coalesce(d."partition", '') AS "partition", w."window",
       sum(d.sbu) AS burn_sbu, sum(d.wasted_sbu) AS wasted_sbu, sum(d.savings_sbu) AS savings_sbu
FROM dash_day d
JOIN w ON d.day > w.last_day - to_days(w.days) AND d.day <= w.last_day
GROUP BY ALL;

-- The running jobs (running_jobs, 70_running.sql) per cluster, account and partition: how many,
-- their GPUs, the GPUs idle now, the SBU per hour they burn and the share of it paying for the
-- GPUs idle now (GPU-charged jobs; NULL when none is).
CREATE OR REPLACE VIEW prometheus_running AS
SELECT cluster, coalesce(account, '') AS account, coalesce("partition", '') AS "partition",
       count(*) AS running_jobs, coalesce(sum(ngpus), 0) AS running_gpus, sum(gpus_idle_now) AS idle_gpus,
       sum(sbu_per_h) AS sbu_per_h, sum(idle_sbu_per_h) AS idle_sbu_per_h
FROM running_jobs
GROUP BY ALL;

-- The newest time the accounting records name (a submit, start or end), over all clusters: the
-- "data up to" every page, report and usage table shows (NULL: no job yet).
CREATE OR REPLACE VIEW accounting_newest AS
SELECT greatest(max(submit_time), max(start_time), max(end_time)) AS newest FROM job;

-- accounting_newest, and whether it is more than a day before as_of (a UTC TIMESTAMP): then the
-- faces warn that the data is old. One row; newest NULL with no job (never old).
CREATE OR REPLACE MACRO data_freshness(as_of) AS TABLE
SELECT newest, coalesce(newest < CAST(as_of AS TIMESTAMP) - INTERVAL 1 DAY, false) AS more_than_a_day_old
FROM accounting_newest;

-- How far behind as_of the data is, in seconds: since the newest finished ingest, the newest
-- sample and the newest time the accounting records name (a submit, start or end), over all
-- clusters. Ungrouped, a max is read from the column's statistics: no scan of the samples.
CREATE OR REPLACE MACRO prometheus_last_ingest_age(as_of) AS TABLE
SELECT epoch(CAST(as_of AS TIMESTAMP)) - epoch(newest) AS age_s
FROM (SELECT max(finished_at) AS newest FROM ingest_log) WHERE newest IS NOT NULL;

CREATE OR REPLACE MACRO prometheus_sample_age(as_of) AS TABLE
SELECT epoch(CAST(as_of AS TIMESTAMP)) - epoch(newest) AS age_s
FROM (SELECT max(time) AS newest FROM sample) WHERE newest IS NOT NULL;

CREATE OR REPLACE MACRO prometheus_accounting_age(as_of) AS TABLE
SELECT epoch(CAST(as_of AS TIMESTAMP)) - epoch(newest) AS age_s
FROM accounting_newest WHERE newest IS NOT NULL;
