-- calc_job_flags_by_owner (stored as job_flags_by_owner): the rows of job_flags with what following
-- their job's advice would have saved (job_savings.savings_sbu), in the columns a list of flags
-- shows, sorts and filters by (the job_flags_savings view's, less the advised request and the job's
-- name), stored in the order of whose jobs they are (account, user; Stored.order in
-- analytics/store/results.py). A user's or a project's flags then lie in a few row groups that the
-- zone maps of account and user find: the list of one researcher's or one project's flags
-- (`jobsight flags`, /api/v1/flags) reads those, not every flag of the cluster, whose text lies
-- spread over all of job_flags' row groups (job_flags keeps the key order its lookups by job and by
-- day want).
-- DuckDB only: it reads the stored job_flags (of the scope's jobs) and job_savings.
CREATE OR REPLACE VIEW calc_job_flags_by_owner AS
SELECT f.cluster, f.job_id_raw, f.job_id, f."user", f.account, f."partition", f.state, f.start_time, f.end_time,
       f.first_day, f.last_day, f.sbu, f.wasted_sbu, s.savings_sbu,
       f.code, f.severity, f.message, f.advice, f.advice_order
FROM flag_scoped_job_flags f
LEFT JOIN (SELECT cluster, job_id_raw, savings_sbu FROM job_savings) s USING (cluster, job_id_raw);
