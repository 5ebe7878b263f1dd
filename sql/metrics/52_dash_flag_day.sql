-- calc_dash_flag_day (stored as dash_flag_day): per day, cluster, user, account, partition, flag
-- code and severity, the flagged jobs of the flag-count chart (counted as in dash_day: also the
-- number of flags of the jobs that ran in a period, the flagged-jobs grid's total) and their SBU
-- burned that day.
CREATE OR REPLACE VIEW calc_dash_flag_day AS
SELECT d.day, d.cluster, d."user", d.account, d."partition", f.code, f.severity,
       count(*) FILTER (WHERE d.is_first)                                     AS jobs_first,
       count(*)                                                               AS jobs_running,
       sum(d.sbu)                                                             AS sbu
FROM job_day d SEMI JOIN metric_day_scope USING (day)
JOIN job_flags f USING (cluster, job_id_raw)
GROUP BY ALL;
