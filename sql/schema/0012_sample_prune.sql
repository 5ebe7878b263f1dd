-- `jobsight prune` (analytics/store/prune.py) moves old samples to the Parquet lake: it removes them
-- from `sample` once the lake holds them and records here what it removed.
-- pruned_month: per cluster and month of the lake's samples partitions, the samples before `before`
-- are in the lake at `lake` only; `jobsight lake export` of that month reads them back from there,
-- so that re-exporting a pruned month never writes a partition without them.
CREATE TABLE IF NOT EXISTS pruned_month (
    cluster      VARCHAR NOT NULL,
    month        VARCHAR NOT NULL,      -- YYYY-MM, the month of the samples' time (the lake's partition)
    before       TIMESTAMP NOT NULL,    -- the latest cutoff applied to this month
    rows_pruned  BIGINT NOT NULL,       -- sample rows removed from this month, over every prune
    lake         VARCHAR NOT NULL,      -- the lake that holds them
    pruned_at    TIMESTAMP NOT NULL,
    PRIMARY KEY (cluster, month)
);
-- pruned_job: the jobs that lost samples. Their stored per-device and per-host results
-- (job_gpu_devices, job_cpu_hosts) were computed from every sample and are kept by every later
-- refresh (analytics/store/results.py), never computed again from the samples left.
CREATE TABLE IF NOT EXISTS pruned_job (
    cluster      VARCHAR NOT NULL,
    job_id_raw   VARCHAR NOT NULL,
    before       TIMESTAMP NOT NULL,    -- its samples before this time are in the lake only
    rows_pruned  BIGINT NOT NULL,
    PRIMARY KEY (cluster, job_id_raw)
);
