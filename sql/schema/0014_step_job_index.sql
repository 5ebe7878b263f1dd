-- Schema version 14: an index on step(job_id_raw). `jobsight job` and the API's one-job answer read
-- one job's steps; without it that read scanned most of the table's row groups (a raw id's text
-- zone maps span nearly every row group), 13 ms of CPU at 2M steps against 2 ms. Not a key: the
-- loader keeps (cluster, job_id_raw, step_id) unique (0003). It costs a bulk insert of steps about
-- a fifth more time and the file about 35 bytes per step.
CREATE INDEX IF NOT EXISTS step_job_id_raw ON step (job_id_raw);
