-- calc_dash_flag_top (stored as dash_flag_top): for each day, every flag of the dash_flag_top_n()
-- most wasteful flagged jobs that ran that day, ranked in the flagged-jobs grid's order (JOB_ORDER
-- in dashboard/queries.py: the same columns, the same directions). The admin's unfiltered grid of
-- any run of days is the top of the union of its days' jobs, exactly: a job among the top n of the
-- period is among the top n of each day it ran in it, with all its flags. (Ranked on the key
-- columns only, then joined to the flags' text: the sort does not carry messages and advice.)
CREATE OR REPLACE MACRO dash_flag_top_n() AS 500;

-- The grid's order as one ascending key (min_by keeps the n smallest per day: a top-n heap, not a sort
-- of every flag of the day). wasted_sbu and sbu are a job's, the same on each of its flags.
CREATE OR REPLACE MACRO dash_flag_rank(wasted_sbu, sbu, cluster, job_id_raw) AS
    {'wasted': -COALESCE(wasted_sbu, 0), 'sbu': COALESCE(-sbu, CAST('Infinity' AS DOUBLE)),
     'cluster': cluster, 'job_id_raw': job_id_raw};

CREATE OR REPLACE VIEW calc_dash_flag_top AS
-- flagged: the jobs that ran on or after the scope's first day (a refresh of a few days reads no others)
WITH flagged AS (SELECT DISTINCT cluster, job_id_raw, wasted_sbu, sbu FROM job_flags
                 WHERE last_day >= (SELECT min(day) FROM metric_day_scope)),
top AS (
    SELECT d.day, unnest(min_by({'cluster': f.cluster, 'job_id_raw': f.job_id_raw},
                                dash_flag_rank(f.wasted_sbu, f.sbu, f.cluster, f.job_id_raw),
                                dash_flag_top_n())) AS job
    FROM job_day d SEMI JOIN metric_day_scope USING (day)
    JOIN flagged f USING (cluster, job_id_raw)
    GROUP BY d.day
)
SELECT top.day, f.*
FROM top JOIN job_flags f ON f.cluster = top.job.cluster AND f.job_id_raw = top.job.job_id_raw;
