-- calc_job_savings (stored as job_savings): one row per flagged job: what the request that would
-- have fit (job_advice) is charged, sbu_if_fitted, and savings_sbu = sbu - sbu_if_fitted. The
-- price is lake_job_charge, 24_lake_job_charge.sql, which analytics/store.py creates over the
-- scope's job_advice rows before it reads this view: the one definition of a charge.
--   A fitted request is priced by the route that priced its job (sbu_source), or not at all: a
--   price by other rules (a job charged its Slurm billing, whose fitted request has no billing for
--   want of TRESBillingWeights) would not be a saving. Then sbu_if_fitted and savings_sbu are NULL
--   ("unknown") and savings_note says why.
--   Of a fat-memory job's two requests (its own partition, the thin one) the one that saves more
--   counts; on a tie it stays where it is.
-- first_day / last_day as in job_flags: the days the job ran, for period filters.
-- DuckDB only: it reads the stored job_metrics and job_flags.

-- A job's savings on one of its days (job_day.fraction): its share of savings_sbu; 0 for a job
-- without advice (no job_savings row: `advised` false); NULL where they are unknown. The per-day
-- summaries (50_dash_day.sql), `jobsight usage` and the reports (sql/views/) add them up.
CREATE OR REPLACE MACRO day_savings(advised, savings_sbu, fraction) AS
    CASE WHEN advised THEN savings_sbu * fraction ELSE 0 END;
CREATE OR REPLACE VIEW calc_job_savings AS
WITH priced AS (
    SELECT c.cluster, c.job_id_raw, c.thin, c.price_note, c.fitted_request,
           c."partition" AS fitted_partition, c.ncpus AS fitted_ncpus, c.ngpus AS fitted_ngpus,
           c.mem_charged_bytes AS fitted_mem_bytes, c.timelimit_s AS fitted_timelimit_s, c.billing AS fitted_billing,
           m.job_id, m."user", m.account, m."partition", m.state, m.start_time, m.end_time, m.sbu, m.sbu_source,
           CASE WHEN c.price_note IS NULL AND c.sbu_source = m.sbu_source THEN c.sbu END AS sbu_if_fitted,
           CASE WHEN c.price_note IS NOT NULL OR c.sbu_source <> m.sbu_source
                THEN COALESCE(c.price_note, printf('partition %s has no %s price', c."partition",
                                                     CASE m.sbu_source WHEN 'billing' THEN 'Slurm billing'
                                                                       ELSE 'charging table' END)) END AS savings_note
    FROM lake_job_charge c
    JOIN job_metrics m USING (cluster, job_id_raw)
)
SELECT p.cluster, p.job_id_raw, p.job_id, p."user", p.account, p."partition", p.state, p.start_time, p.end_time,
       p.sbu, p.sbu_source, p.sbu_if_fitted, p.sbu - p.sbu_if_fitted AS savings_sbu, p.savings_note,
       p.fitted_request, p.fitted_partition, p.fitted_ncpus, p.fitted_ngpus, p.fitted_mem_bytes,
       p.fitted_timelimit_s, p.fitted_billing, d.first_day, d.last_day
FROM priced p
LEFT JOIN (SELECT cluster, job_id_raw, min(first_day) AS first_day, max(last_day) AS last_day
           FROM job_flags SEMI JOIN metric_flag_scope USING (cluster, job_id_raw) GROUP BY ALL) d
    USING (cluster, job_id_raw)
QUALIFY row_number() OVER (PARTITION BY p.cluster, p.job_id_raw
                           ORDER BY p.sbu - p.sbu_if_fitted DESC NULLS LAST, p.thin) = 1;
