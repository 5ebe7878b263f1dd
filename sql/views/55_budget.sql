-- Budgets: each allocation (table budget: per account, or per user within an account) against the
-- burn of its jobs, from job_day, the one split of jobs into days (a job running across the
-- period's edge counts with its share of the time inside), as summed per day, cluster, user,
-- account and partition in dash_day (sql/metrics/50_dash_day.sql). `jobsight usage --budget`, the
-- weekly reports and the dashboard read budget_status / budget_current.
-- With plain DuckDB:  SELECT * FROM budget_status(DATE '2026-11-23');   -- as of the day before

-- The allocation period holding day d, [period_start, period_end): budget.start + k x budget.period
-- (jobsight.toml [report] budget_start, budget_period). A month added to the 31st ends on the
-- month's last day.
CREATE OR REPLACE MACRO budget_periods(d) AS TABLE
WITH p AS (
    SELECT CAST(setting_text('budget.start') AS DATE) AS anchor, CAST(d AS DATE) AS day,
           setting_text('budget.period') AS period
), s AS (
    SELECT *, CASE period WHEN 'month' THEN 1 WHEN 'quarter' THEN 3 WHEN 'year' THEN 12 END AS step FROM p
), k AS (
    SELECT *, CAST(floor(date_diff('day', anchor, day) / 7.0) AS BIGINT) AS weeks,
           CAST(floor(((year(day) - year(anchor)) * 12 + month(day) - month(anchor)) / step) AS BIGINT) AS steps
    FROM s
), m AS (
    SELECT *, CASE WHEN CAST(anchor + to_months(CAST(steps * step AS INTEGER)) AS DATE) > day
                   THEN steps - 1 ELSE steps END AS n
    FROM k
)
SELECT period,
       CASE WHEN period = 'week' THEN anchor + CAST(7 * weeks AS INTEGER)
            ELSE CAST(anchor + to_months(CAST(n * step AS INTEGER)) AS DATE) END          AS period_start,
       CASE WHEN period = 'week' THEN anchor + CAST(7 * (weeks + 1) AS INTEGER)
            ELSE CAST(anchor + to_months(CAST((n + 1) * step AS INTEGER)) AS DATE) END    AS period_end
FROM m;

-- The allocation in force per account and user: jobsight.toml's [budgets] first, then a saved
-- `sacctmgr show assoc` ([budget_options] assoc_file), then sacctmgr's own (per cluster; NULL:
-- every cluster). allocation_sbu in the charged unit: Slurm's GrpTRESMins billing=N are
-- billing-minutes, and a billing-hour is charging.factor SBU (the slurm-billing policy's rule,
-- sql/metrics/24_lake_job_charge.sql).
CREATE OR REPLACE VIEW budget_allocation AS
SELECT cluster, account, "user", source, unit, amount,
       CASE unit WHEN 'sbu' THEN amount
                 WHEN 'billing_minutes' THEN amount / 60.0 * setting_value('charging.factor') END AS allocation_sbu
FROM budget
QUALIFY rank() OVER (PARTITION BY account, "user"
                     ORDER BY CASE source WHEN 'config' THEN 0 WHEN 'file' THEN 1 ELSE 2 END) = 1;

-- Every allocation as of the day before `until` (the figures count the days before it):
--   burned_sbu     the burn of its jobs (the account's, or the user's in it) in the allocation period so far
--   remaining_sbu  allocation_sbu - burned_sbu (below 0: overspent)
--   used_pct       burned_sbu / allocation_sbu x 100
--   burn_rate_7d, burn_rate_30d   SBU per day over the 7 and 30 days before `until`
--   run_out_date   when remaining_sbu is used up at the 30-day rate, counted from `until`;
--                  NULL when the rate is 0, when nothing remains, or when it is over 100 years away
--   days_to_reset  the days from `until` to period_end, when the allocation resets
--   remaining_at_reset_sbu  what will remain then at the 30-day rate: remaining_sbu -
--                  burn_rate_30d x days_to_reset (below 0: overspent by then)
--   alert          'over' from budget.over_pct of the allocation used, 'warn' from budget.warn_pct, else 'ok'
CREATE OR REPLACE MACRO budget_status(until) AS TABLE
WITH t AS (
    SELECT CAST(CAST(until AS DATE) AS TIMESTAMP) AS upto
), b AS (
    SELECT a.*, p.period, p.period_start, p.period_end, t.upto
    FROM budget_allocation a, t, budget_periods(CAST(until AS DATE) - 1) p
), burn AS (
    SELECT b.cluster, b.account, b."user", b.source, b.allocation_sbu, b.period, b.period_start, b.period_end, b.upto,
           COALESCE(sum(d.sbu) FILTER (WHERE d.day >= b.period_start), 0)                AS burned_sbu,
           COALESCE(sum(d.sbu) FILTER (WHERE d.day >= b.upto - INTERVAL 7 DAY), 0) / 7.0   AS burn_rate_7d,
           COALESCE(sum(d.sbu) FILTER (WHERE d.day >= b.upto - INTERVAL 30 DAY), 0) / 30.0 AS burn_rate_30d
    FROM b
    LEFT JOIN dash_day d
      ON d.account = b.account AND (b."user" IS NULL OR d."user" = b."user")
     AND (b.cluster IS NULL OR d.cluster = b.cluster)
     AND d.day >= least(CAST(b.period_start AS TIMESTAMP), b.upto - INTERVAL 30 DAY) AND d.day < b.upto
    GROUP BY ALL
), r AS (
    SELECT *, allocation_sbu - burned_sbu AS remaining_sbu,
           (allocation_sbu - burned_sbu) / NULLIF(burn_rate_30d, 0) AS days_left
    FROM burn
)
SELECT cluster, account, "user", source, period, period_start, period_end,
       CAST(upto AS DATE) - 1                                                  AS as_of,
       allocation_sbu, burned_sbu, remaining_sbu,
       burned_sbu * 100.0 / NULLIF(allocation_sbu, 0)                          AS used_pct,
       burn_rate_7d, burn_rate_30d,
       CASE WHEN remaining_sbu > 0 AND days_left < 36525
            THEN CAST(upto + to_seconds(days_left * 86400.0) AS DATE) END       AS run_out_date,
       date_diff('day', CAST(upto AS DATE), period_end)                        AS days_to_reset,
       remaining_sbu - burn_rate_30d * date_diff('day', CAST(upto AS DATE), period_end) AS remaining_at_reset_sbu,
       CASE WHEN burned_sbu * 100.0 >= setting_value('budget.over_pct') * allocation_sbu THEN 'over'
            WHEN burned_sbu * 100.0 >= setting_value('budget.warn_pct') * allocation_sbu THEN 'warn'
            ELSE 'ok' END                                                       AS alert
FROM r;

-- budget_status as of the latest day with accounting data (today, where ingest runs regularly).
CREATE OR REPLACE MACRO budget_data_until() AS (
    SELECT COALESCE(max(day), date_trunc('day', CAST(current_timestamp AT TIME ZONE 'UTC' AS TIMESTAMP)))
           + INTERVAL 1 DAY
    FROM dash_day);
CREATE OR REPLACE VIEW budget_current AS SELECT * FROM budget_status(budget_data_until());
