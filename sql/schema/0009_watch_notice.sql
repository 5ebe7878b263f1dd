-- `jobsight watch` (analytics/watch.py): the notices sent to the owners of running jobs whose GPUs
-- sit idle. One row per attempt to notify a job's owner. The row is committed with outcome
-- 'sending' before the message leaves and updated after, so a watch that crashes in between never
-- sends that job's notice again (at most once per job); a 'failed' attempt is retried next cycle.
CREATE TABLE IF NOT EXISTS watch_notice (
    notice_id    BIGINT PRIMARY KEY,
    cluster      VARCHAR NOT NULL,
    job_id_raw   VARCHAR NOT NULL,      -- the job (key cluster, job_id_raw, as in job)
    job_id       VARCHAR NOT NULL,      -- as the scheduler prints it
    "user"       VARCHAR NOT NULL,      -- the job's owner, notified
    address      VARCHAR NOT NULL,      -- the recipient
    sent_at      TIMESTAMP NOT NULL,    -- UTC, when the attempt started
    outcome      VARCHAR NOT NULL,      -- sending | sent (SMTP) | written (.eml) | failed
    detail       VARCHAR,               -- the .eml path, the SMTP server, or why it failed
    gpus_idle    INTEGER,               -- what the notice said
    idle_min     DOUBLE
);
CREATE SEQUENCE IF NOT EXISTS watch_notice_id_seq START 1;
