-- What the dashboard's queries (analytics/queries/summaries.py) and usage_summary (40_usage.sql) use
-- to add up the stored per-day summaries (dash_day, dash_eff_day, dash_flag_day:
-- sql/metrics/5N_dash_*.sql) over a period.
--
-- The jobs that ran in [since, until] are those whose first day is in it, plus those already
-- running on `since`: per day the summaries keep the jobs starting that day (*_first) and those
-- running that day (*_running); a period takes the running count on its first day and the starting
-- count on the others. With no `since`, since is NULL and every day adds its *_first: each job
-- once, on its first day.
CREATE OR REPLACE MACRO dash_jobs_in_period(n_first, n_running, day, since) AS
    sum(CASE WHEN day = since THEN n_running ELSE n_first END);
-- The same rule row by row: a job's row counts it when it is the job's first day or the period's.
CREATE OR REPLACE MACRO dash_job_once(is_first, day, since) AS is_first OR day = since;
