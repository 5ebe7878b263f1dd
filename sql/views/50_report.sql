-- Numbers the weekly reports (`jobsight report`) need beyond the stored job_metrics, job_flags and
-- job_day. Every report number is one of these macros over [since, until): a job that ran across
-- the range's edges counts with its share of the time inside (job_day), exactly as `jobsight usage`
-- counts it, so report sums equal usage sums for the same days.
--
-- The totals, the days and the trend add up the per-day sums (dash_day, sql/metrics/50_dash_day.sql),
-- as `jobsight usage` and the dashboard do; the flag counts the per-day flag summaries
-- (dash_flag_day); the jobs that wasted the most are ranked over job_day's rows of the range and
-- their flags read from job_flags. The macros name their tables through query_table(src), so that
-- a slice (a project page's rows narrowed by filters, summed by dash_day_sums) reads the same way.
-- With plain DuckDB:  SELECT * FROM report_totals('dash_day', DATE '2026-11-16', DATE '2026-11-23');

-- One row per job and UTC day it ran, with the job's share of that day, its efficiencies and the
-- day's share of what its advice would have saved (usage_job_day, 40_usage.sql).
CREATE OR REPLACE VIEW report_job_day AS SELECT * FROM usage_job_day;

-- Whether a row of `user` and `account` is one of the jobs of `users` or `accounts` (lists; both
-- NULL: every job), as a report on some users and accounts slices its rows.
CREATE OR REPLACE MACRO report_subject(users, accounts, "user", account) AS
    (users IS NULL AND accounts IS NULL) OR list_contains(users, "user") OR list_contains(accounts, account);

-- The scopes a report's rows are grouped by: per user, per account, per (account, user) member, per
-- partition and for the cluster. Each macro below takes the list of those it groups by (`scopes`,
-- default: all it has), so that a report on a few users groups by those users only. A row of a scope
-- is keyed by its columns (report_key): a member row by its account and user, the cluster's by none.
-- (One row per input row and scope, grouped: GROUPING SETS took DuckDB tens of ms to plan.)
CREATE OR REPLACE MACRO report_key(scope, col, value) AS
    CASE WHEN scope = col OR (scope = 'member' AND col IN ('user', 'account')) THEN value END;

-- Totals per user, per account, per (account, user) member, per partition and for the cluster,
-- from per-day sums (src: dash_day, sql/metrics/50_dash_day.sql, or rows of its columns made by
-- dash_day_sums), as `jobsight usage` and the dashboard add them up. scope says which;
-- wasted_pct and savings_pct as `jobsight usage`; unrated_sbu is burn whose efficiency was not
-- measured (no TotalCPU, no GPU samples); savings_unknown_sbu the burn of jobs whose advice could
-- not be priced (job_savings.savings_note). A job counts once per group: on its first day in the
-- range (dash_jobs_in_period; a job's user, account, partition and core- and GPU-hours being
-- known or not are the same on each of its days). With `users` or `accounts` (lists), only those
-- subjects' jobs (report_subject). The cluster's row is there also when src has no row in the range.
CREATE OR REPLACE MACRO report_totals(src, since, until, users := NULL, accounts := NULL,
                                      scopes := ['user', 'account', 'member', 'partition', 'cluster']) AS TABLE
SELECT s.scope,
       report_key(s.scope, 'user', "user")                                    AS "user",
       report_key(s.scope, 'account', account)                                AS account,
       report_key(s.scope, 'partition', "partition")                          AS "partition",
       COALESCE(CAST(dash_jobs_in_period(jobs_first, jobs_running, day, since) AS BIGINT), 0) AS jobs,
       sum(sbu)                                                               AS sbu,
       sum(wasted_sbu)                                                        AS wasted_sbu,
       pct_of(sum(wasted_sbu), sum(wasted_w))                                 AS wasted_pct,
       sum(unrated_sbu)                                                       AS unrated_sbu,
       sum(savings_sbu)                                                       AS savings_sbu,
       pct_of(sum(savings_sbu), sum(savings_w))                               AS savings_pct,
       sum(savings_unknown_sbu)                                               AS savings_unknown_sbu,
       sum(core_hours)                                                        AS core_hours,
       sum(gpu_hours)                                                         AS gpu_hours,
       -- the jobs left out of core_hours / gpu_hours: they ran on an unknown number of cores / GPUs
       COALESCE(CAST(dash_jobs_in_period(core_unknown_first, core_unknown_running, day, since) AS BIGINT), 0)
                                                                              AS core_hours_unknown_jobs,
       COALESCE(CAST(dash_jobs_in_period(gpu_unknown_first, gpu_unknown_running, day, since) AS BIGINT), 0)
                                                                              AS gpu_hours_unknown_jobs,
       sum(idle_gpu_hours)                                                    AS idle_gpu_hours,
       -- allocation-weighted means (dash_day): efficiency x weight over the weight of known ones
       sum(cpu_x_w) / NULLIF(sum(cpu_w), 0)                                   AS cpu_eff_pct,
       sum(gpu_x_w) / NULLIF(sum(gpu_w), 0)                                   AS gpu_util_pct,
       sum(mem_x_w) / NULLIF(sum(mem_w), 0)                                   AS mem_eff_pct,
       sum(time_x_w) / NULLIF(sum(time_w), 0)                                 AS time_eff_pct
FROM unnest(scopes) AS s(scope)
LEFT JOIN (SELECT * FROM query_table(src)
           WHERE day >= since AND day < until AND report_subject(users, accounts, "user", account)) ON TRUE
GROUP BY ALL
HAVING s.scope = 'cluster' OR count(day) > 0;

-- Daily burn split into used (sbu - wasted), wasted and unrated, per user, per account and
-- cluster, from the per-day sums (src, as report_totals) of `users` and `accounts` (or every job).
CREATE OR REPLACE MACRO report_daily(src, since, until, users := NULL, accounts := NULL,
                                     scopes := ['user', 'account', 'cluster']) AS TABLE
SELECT s.scope,
       report_key(s.scope, 'user', "user")                                    AS "user",
       report_key(s.scope, 'account', account)                                AS account,
       day,
       sum(sbu)                                                               AS sbu,
       sum(used_sbu)                                                          AS used_sbu,
       sum(wasted_sbu)                                                        AS wasted_sbu,
       sum(unrated_sbu)                                                       AS unrated_sbu
FROM query_table(src), unnest(scopes) AS s(scope)
WHERE day >= since AND day < until AND report_subject(users, accounts, "user", account)
GROUP BY ALL;

-- The report window [since, until) and the n windows of the same length before it, per user,
-- account and cluster: window 0 is the report's own (the trend "this week vs the previous four").
-- For the jobs of `users` or `accounts` (lists; both NULL: every job), as report_subject selects them.
-- From the per-day summaries (dash_day, sql/metrics/50_dash_day.sql: job_day's rows summed per
-- day), so that the report's own rows need only its window; a job counts once per window, on its
-- first day or on the window's first when it started before (dash_jobs_in_period, 35_dashboard.sql).
CREATE OR REPLACE MACRO report_trend(since, until, n, users := NULL, accounts := NULL,
                                     scopes := ['user', 'account', 'cluster']) AS TABLE
WITH d AS (
    SELECT *, CAST(n AS BIGINT) - CAST(floor(epoch(day - (since - n * (until - since))) / epoch(until - since)) AS BIGINT) AS windows_back
    FROM dash_day
    WHERE day >= since - n * (until - since) AND day < until AND report_subject(users, accounts, "user", account)
)
SELECT s.scope,
       report_key(s.scope, 'user', "user")                                    AS "user",
       report_key(s.scope, 'account', account)                                AS account,
       windows_back,
       since - windows_back * (until - since)                                 AS window_start,
       CAST(dash_jobs_in_period(jobs_first, jobs_running, day, since - windows_back * (until - since))
            AS BIGINT)                                                        AS jobs,
       sum(sbu)                                                               AS sbu,
       sum(wasted_sbu)                                                        AS wasted_sbu,
       sum(savings_sbu)                                                       AS savings_sbu,
       sum(idle_gpu_hours)                                                    AS idle_gpu_hours
FROM d, unnest(scopes) AS s(scope)
GROUP BY ALL;

-- The #SBATCH lines that would have fit the jobs of `flags` (a slice of job_flags): the options of
-- the request their advice adds up to (job_savings.fitted_request), one line per option. A job
-- whose advice changes no option of its request gives none.
CREATE OR REPLACE MACRO sbatch_lines(fitted_request) AS
    CASE WHEN fitted_request <> '' THEN '#SBATCH ' || replace(fitted_request, ' --', chr(10) || '#SBATCH --') END;
CREATE OR REPLACE MACRO sbatch_advice(flags) AS TABLE
SELECT cluster, job_id_raw, sbatch_lines(fitted_request) AS sbatch_lines
FROM job_savings SEMI JOIN (SELECT DISTINCT cluster, job_id_raw FROM query_table(flags)) USING (cluster, job_id_raw)
WHERE fitted_request <> '';

-- One row per job with its flags folded: codes, worst severity, messages, and lead_advice (the
-- advice that leads, job_flags.advice_order 1: the first the job's page and `jobsight job` give).
CREATE OR REPLACE MACRO flag_summary(flags) AS TABLE
SELECT cluster, job_id_raw,
       string_agg(code, ', ' ORDER BY code)                                   AS flag_codes,
       CASE max(CASE severity WHEN 'alarm' THEN 3 WHEN 'warn' THEN 2 ELSE 1 END)
            WHEN 3 THEN 'alarm' WHEN 2 THEN 'warn' ELSE 'info' END            AS worst_severity,
       string_agg(message, '; ' ORDER BY code)                                AS flag_messages,
       arg_min(advice, advice_order)                                          AS lead_advice
FROM query_table(flags) GROUP BY ALL;

CREATE OR REPLACE VIEW job_sbatch_advice AS SELECT * FROM sbatch_advice('job_flags');

-- The flags with what following their job's advice would have saved (job_savings; NULL: unknown),
-- for `jobsight flags`.
CREATE OR REPLACE VIEW job_flags_savings AS
SELECT f.*, s.savings_sbu, s.sbu_if_fitted
FROM job_flags f
LEFT JOIN (SELECT cluster, job_id_raw, savings_sbu, sbu_if_fitted FROM job_savings) s USING (cluster, job_id_raw);
CREATE OR REPLACE VIEW job_flag_summary AS SELECT * FROM flag_summary('job_flags');

-- Each job of src (job_day or a slice of it) that ran in [since, until), with its burn and waste
-- inside it (the day split, as every sum of the reports); with `users` or `accounts`, only those
-- subjects' jobs (report_subject).
CREATE OR REPLACE MACRO window_jobs(src, since, until, users := NULL, accounts := NULL) AS TABLE
SELECT cluster, job_id_raw, any_value("user") AS "user", any_value(account) AS account,
       sum(sbu) AS sbu, sum(wasted_sbu) AS wasted_sbu
FROM query_table(src)
WHERE day >= since AND day < until AND report_subject(users, accounts, "user", account)
GROUP BY cluster, job_id_raw;

-- A job's rank among the jobs of its `part` that wasted the most: most wasted SBU first (an unknown
-- waste last), then most SBU, then the job id. The order of every list of the jobs that wasted most
-- (jobs_to_fix sorts by the same three, as a top-n sort); over window_jobs rows.
CREATE OR REPLACE MACRO waste_rank(part, wasted_sbu, sbu, job_id_raw) AS
    row_number() OVER (PARTITION BY part ORDER BY wasted_sbu DESC NULLS LAST, sbu DESC NULLS LAST, job_id_raw);

-- The jobs of `top` (window_jobs rows with their ranks) with what a list of them shows: what
-- following the advice would have saved inside [since, until) (day_savings, as usage_job_day), name,
-- partition, state and the whole run's efficiencies (from src), the flags folded (flag_summary, with
-- the leading advice), the #SBATCH lines that would have fit (sbatch_lines) and why a saving is
-- unknown (savings_note). Only the src rows, flags and savings of top's jobs are read for these
-- (job_day, job_flags and job_savings are looked up by their index on job_id_raw).
CREATE OR REPLACE MACRO top_job_details(top, src, flags, since, until) AS TABLE
WITH top_savings AS MATERIALIZED (    -- by job_id_raw (indexed) alone, the cluster at the join below
    SELECT cluster, job_id_raw, savings_sbu, savings_note, sbatch_lines(fitted_request) AS sbatch_lines
    FROM job_savings WHERE job_id_raw IN (SELECT job_id_raw FROM query_table(top))
), about AS (
    SELECT d.cluster, d.job_id_raw, any_value(d.job_id) AS job_id, any_value(d."partition") AS "partition",
           any_value(d.state) AS state, any_value(d.job_name) AS job_name,
           sum(day_savings(v.cluster IS NOT NULL, v.savings_sbu, d.fraction))
               FILTER (WHERE d.day >= since AND d.day < until)                       AS savings_sbu,
           any_value(d.cpu_eff_pct) AS cpu_eff_pct, any_value(d.gpu_util_pct) AS gpu_util_pct,
           any_value(d.mem_eff_pct) AS mem_eff_pct, any_value(d.time_eff_pct) AS time_eff_pct,
           any_value(d.start_time) AS start_time, any_value(d.job_elapsed_s) AS elapsed_s,
           any_value(d.ncpus) AS ncpus, any_value(d.ngpus) AS ngpus, any_value(d.charge_driver) AS charge_driver,
           any_value(v.savings_note) AS savings_note, any_value(v.sbatch_lines) AS sbatch_lines
    -- by job_id_raw alone (job_day's index: a filter on the day too would scan the range), the
    -- cluster at the join below; every column but the savings is the job's on each of its days
    FROM query_table(src) d
    LEFT JOIN top_savings v ON v.cluster = d.cluster AND v.job_id_raw = d.job_id_raw
    WHERE d.job_id_raw IN (SELECT job_id_raw FROM query_table(top))
    GROUP BY d.cluster, d.job_id_raw
), top_flags AS MATERIALIZED (    -- as top_savings: flag_summary groups by cluster, the join below matches it
    -- (flag_summary's columns only: each other one is a string decompressed per row looked up)
    SELECT cluster, job_id_raw, code, severity, message, advice, advice_order
    FROM query_table(flags) WHERE job_id_raw IN (SELECT job_id_raw FROM query_table(top))
)
SELECT t.cluster, t.job_id_raw, d.job_id, t."user", t.account, d."partition", d.state, d.job_name,
       t.sbu, t.wasted_sbu, d.* EXCLUDE (cluster, job_id_raw, job_id, "partition", state, job_name, sbatch_lines),
       f.flag_codes, f.worst_severity, f.flag_messages, f.lead_advice, d.sbatch_lines,
       t.* EXCLUDE (cluster, job_id_raw, "user", account, sbu, wasted_sbu)
FROM query_table(top) t
JOIN about d USING (cluster, job_id_raw)
LEFT JOIN flag_summary(top_flags) f USING (cluster, job_id_raw);

-- Jobs of src (job_day or a slice of it) that ran in [since, until) with their burn and waste
-- inside it, ranked by wasted SBU (waste_rank) within their user, their account and the cluster;
-- only the top n of each ranking are returned. With `users` or `accounts`, over those subjects'
-- jobs only, as report_subject selects them (a few subjects' top jobs read job_day itself: the
-- window's rows of their jobs, then the few top jobs' rows by job_day's index on job_id_raw).
CREATE OR REPLACE MACRO report_top_jobs(src, flags, since, until, n, users := NULL, accounts := NULL) AS TABLE
WITH ranked AS (
    SELECT *, waste_rank("user", wasted_sbu, sbu, job_id_raw) AS rank_user,
           waste_rank(account, wasted_sbu, sbu, job_id_raw) AS rank_account,
           waste_rank(NULL, wasted_sbu, sbu, job_id_raw) AS rank_cluster
    FROM window_jobs(src, since, until, users := users, accounts := accounts)
), top AS MATERIALIZED (       -- read four times by top_job_details: computed once
    SELECT * FROM ranked WHERE rank_user <= n OR rank_account <= n OR rank_cluster <= n
)
SELECT * FROM top_job_details(top, src, flags, since, until);

-- The rows of src in [since, until) of the jobs whose waste inside it may be among the n largest:
-- every such job with all its rows there, so that window_jobs over them ranks the first n jobs
-- exactly as over all of src, without summing every job. A waste is never negative (sbu times a
-- share clamped to 0..1, 25_lake_job_metrics.sql), so a job's waste in the range is at least its
-- largest day there: the n-th largest of the largest days of the jobs found among the 4n most
-- wasteful days ("low") is at most the n-th largest waste. And it is at most the job's whole
-- waste, which each of its rows gives (a day's waste is the whole run's times its fraction): only
-- the jobs whose whole waste reaches low are kept (with slack for rounding), their rows looked up
-- by job_id_raw (indexed in job_day). With fewer than n such jobs or a low of 0: every row.
CREATE OR REPLACE MACRO waste_candidates(src, since, until, n) AS TABLE
WITH largest AS (
    SELECT max(wasted_sbu) AS most
    FROM (SELECT cluster, job_id_raw, wasted_sbu FROM query_table(src)
          WHERE day >= since AND day < until ORDER BY wasted_sbu DESC NULLS LAST LIMIT 4 * n)
    GROUP BY cluster, job_id_raw
), bound AS (
    SELECT CASE WHEN count(most) >= n THEN min(most) END AS low
    FROM (SELECT most FROM largest ORDER BY most DESC NULLS LAST LIMIT n)
), kept AS (
    SELECT DISTINCT job_id_raw FROM query_table(src), bound
    WHERE day >= since AND day < until
      AND (bound.low IS NULL OR bound.low <= 0 OR wasted_sbu >= bound.low * fraction * (1 - 1e-9))
)
SELECT cluster, job_id_raw, "user", account, day, sbu, wasted_sbu FROM query_table(src)
WHERE day >= since AND day < until AND job_id_raw IN (SELECT job_id_raw FROM kept);

-- The jobs to fix of one scope (a dashboard page): the first n jobs of src (a slice of job_day: the
-- rows of the scope and the page's filters, with at least the columns waste_candidates reads) that
-- wasted most in [since, until), with the reports' figures and details (from job_day, whose rows
-- of a job are all in src or none: a scope and the page's filters select whole jobs), "rank" first. Over one user's, one account's or the whole cluster's rows:
-- the very jobs, order and figures of that user's, account's or the admin report's "jobs that
-- wasted the most" (report_top_jobs: its rank_user, rank_account or rank_cluster). Only the rows
-- of waste_candidates are summed.
CREATE OR REPLACE MACRO jobs_to_fix(src, flags, since, until, n) AS TABLE
WITH candidates AS (
    SELECT * FROM waste_candidates(src, since, until, n)
), top AS (
    SELECT *, row_number() OVER (ORDER BY wasted_sbu DESC NULLS LAST, sbu DESC NULLS LAST, job_id_raw) AS "rank"
    FROM (SELECT * FROM window_jobs(candidates, since, until)
          ORDER BY wasted_sbu DESC NULLS LAST, sbu DESC NULLS LAST, job_id_raw LIMIT n)   -- waste_rank's order
)
SELECT * FROM top_job_details(top, job_day, flags, since, until) ORDER BY "rank";

-- Flagged jobs that ran in [since, until), by flag code: per user, per account and for the cluster
-- (how many, and how many of them with the code as an alarm). For the jobs of `users` or `accounts`
-- as report_subject selects them. From the per-day flag summaries (dash_flag_day), a job once per code
-- by dash_jobs_in_period, as report_trend counts jobs.
CREATE OR REPLACE MACRO report_flag_counts(since, until, users := NULL, accounts := NULL,
                                           scopes := ['user', 'account', 'cluster']) AS TABLE
WITH f AS (
    SELECT * FROM dash_flag_day
    WHERE day >= since AND day < until AND report_subject(users, accounts, "user", account)
)
SELECT s.scope,
       report_key(s.scope, 'user', "user")                                    AS "user",
       report_key(s.scope, 'account', account)                                AS account,
       code,
       CAST(dash_jobs_in_period(jobs_first, jobs_running, day, since) AS BIGINT) AS jobs,
       CAST(dash_jobs_in_period(CASE WHEN severity = 'alarm' THEN jobs_first ELSE 0 END,
                                CASE WHEN severity = 'alarm' THEN jobs_running ELSE 0 END, day, since)
            AS BIGINT)                                                        AS alarms
FROM f, unnest(scopes) AS s(scope)
GROUP BY ALL;
