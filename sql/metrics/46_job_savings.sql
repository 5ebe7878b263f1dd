-- calc_job_savings (stored as job_savings): one row per flagged job: what the request that would
-- have fit (job_advice) is charged, sbu_if_fitted, and savings_sbu = sbu - sbu_if_fitted. The
-- price is lake_job_charge, 24_lake_job_charge.sql, which analytics/store.py creates over the
-- scope's job_advice rows before it reads this view: the one definition of a charge.
--   A fitted request is priced by the route that priced its job (sbu_source), or not at all: a
--   price by other rules (a job charged its Slurm billing, whose fitted request has no billing for
--   want of TRESBillingWeights) would not be a saving. Then sbu_if_fitted and savings_sbu are NULL
--   ("unknown") and savings_note says why. A priced request priced by a route of its own
--   (job_advice.price_route: its own partition without GPUs) has that route in savings_note.
--   Of a fat-memory job's two requests (its own partition, the thin one) the one that saves more
--   counts; on a tie it stays where it is.
-- first_day / last_day as in job_flags (carried by job_advice): the days the job ran, for period
-- filters.
-- DuckDB only: it reads the stored job_metrics and job_advice.

-- A job's savings on one of its days (job_day.fraction): its share of savings_sbu; 0 for a job
-- without advice (no job_savings row: `advised` false); NULL where they are unknown. The per-day
-- summaries (50_dash_day.sql), `jobsight usage` and the reports (sql/views/) add them up.
CREATE OR REPLACE MACRO day_savings(advised, savings_sbu, fraction) AS
    CASE WHEN advised THEN savings_sbu * fraction ELSE 0 END;
-- Whether the thin-partition request (savings sq) beats the job's own (sp): it saves more, NULL
-- ("unknown") counting as less than any figure; a tie stays where it is.
CREATE OR REPLACE MACRO thin_saves_more(sq, sp) AS sq IS NOT NULL AND (sp IS NULL OR sq > sp);
CREATE OR REPLACE VIEW calc_job_savings AS
WITH priced AS (
    SELECT c.cluster, c.job_id_raw, c.thin, c.price_note, c.fitted_request,
           c."partition" AS fitted_partition, c.ncpus AS fitted_ncpus, c.ngpus AS fitted_ngpus,
           c.mem_charged_bytes AS fitted_mem_bytes, c.timelimit_s AS fitted_timelimit_s, c.billing AS fitted_billing,
           m.job_id, m."user", m.account, m."partition", m.state, m.start_time, m.end_time, m.sbu, m.sbu_source,
           c.first_day, c.last_day,
           CASE WHEN c.price_note IS NULL AND c.sbu_source = m.sbu_source THEN c.sbu END AS sbu_if_fitted,
           CASE WHEN c.price_note IS NOT NULL OR c.sbu_source <> m.sbu_source
                THEN COALESCE(c.price_note, printf('partition %s has no %s price', c."partition",
                                                     CASE m.sbu_source WHEN 'billing' THEN 'Slurm billing'
                                                                       ELSE 'charging table' END))
                ELSE c.price_route END AS savings_note
    FROM lake_job_charge c
    -- only the scope's jobs (flag_scoped_*: analytics/store.py SCOPED): the planner misjudges the
    -- priced requests as the larger side and would build its hash table on all of job_metrics (1 s
    -- for a refresh of a few hundred jobs)
    JOIN flag_scoped_job_metrics m USING (cluster, job_id_raw)
)
-- One row per job: its own request, unless its thin-partition one (a few jobs have one, at most one
-- each) saves more. Each side joined to the few thin rows, so that no hash table holds every job's
-- row (a correlated NOT EXISTS grouped all of them: 2 s of a 1M-job rebuild).
, thin AS (SELECT cluster, job_id_raw, sbu - sbu_if_fitted AS savings FROM priced WHERE thin)
SELECT p.cluster, p.job_id_raw, p.job_id, p."user", p.account, p."partition", p.state, p.start_time, p.end_time,
       p.sbu, p.sbu_source, p.sbu_if_fitted, p.sbu - p.sbu_if_fitted AS savings_sbu, p.savings_note,
       p.fitted_request, p.fitted_partition, p.fitted_ncpus, p.fitted_ngpus, p.fitted_mem_bytes,
       p.fitted_timelimit_s, p.fitted_billing, p.first_day, p.last_day
FROM priced p
LEFT JOIN thin t ON t.cluster = p.cluster AND t.job_id_raw = p.job_id_raw
-- the own row (t: its thin row) loses when the thin one saves more; the thin row (t: itself) wins
-- when it saves more than the own row, NULL savings counting as less than any figure
LEFT JOIN (SELECT p2.cluster, p2.job_id_raw, p2.sbu - p2.sbu_if_fitted AS savings
           FROM priced p2 SEMI JOIN thin USING (cluster, job_id_raw) WHERE NOT p2.thin) o
    ON p.thin AND o.cluster = p.cluster AND o.job_id_raw = p.job_id_raw
WHERE CASE WHEN p.thin THEN o.cluster IS NULL OR thin_saves_more(p.sbu - p.sbu_if_fitted, o.savings)
           ELSE NOT COALESCE(thin_saves_more(t.savings, p.sbu - p.sbu_if_fitted), false) END;
