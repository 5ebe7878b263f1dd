-- calc_job_advice (stored as job_advice): for each flagged job, the request that would have fit:
-- its own, resized as its flags advise (job_flags.advised_*), in the place they name. Its columns
-- are a request's (23_lake_job_request.sql), so that 46_job_savings.sql prices it with the very
-- charging SQL that priced the job (24_lake_job_charge.sql). Rules: docs/metrics.md#what-the-advice-would-have-saved.
--   partition: jobsight.toml [advice]: cpu_partition for work without GPUs (gpu_idle,
--       cpu_job_on_gpu_partition), else small_gpu_partition (gpu_fits_smaller); else the job's own.
--       A job that drops all its GPUs while no cpu_partition is set is priced in its own partition
--       without GPUs (its rate row, or its TRESBillingWeights, whose GPU term a request without
--       GPUs leaves out), and price_route names that route: an unknown saving would drop the
--       largest waste there is, idle GPUs, out of every savings total.
--       A fat-memory job that fits a thin node (mem_fits_thin) gets a second row, in mem_partition:
--       46 keeps the cheaper of the two.
--   billing (policy slurm-billing only): the job's own when the request is unchanged; else Slurm's sum of
--       TRES x TRESBillingWeights of the request's partition, truncated to a whole number as Slurm
--       stores it, and only where the weights of the job's own partition give the billing it was
--       charged (a formula they do not reproduce, PriorityFlags=MAX_TRES say, is not guessed at).
--       NULL otherwise.
--   price_note: why the request has no price (NULL: it has one); 46 gives no savings then.
--   price_route: how a priced request was priced where that is not plain (NULL: as the job was).
-- DuckDB only: it reads the stored job_flags of the jobs in metric_flag_scope (flag_scoped_*: the
-- TEMP views of analytics/store.py SCOPED) and their job_metrics; calc_partition_weights is
-- 40_job_flags.sql's.

-- Slurm's billing of a request under weights w (NULL: unknown weights, a TRES the request does not
-- describe, or GPUs of no known type where the weights price types); the 1e-9 keeps a sum such
-- as 2.9999999 from truncating below Slurm's 3.
CREATE OR REPLACE MACRO slurm_billing(w, ncpus, mem_bytes, nnodes, ngpus, gpu_type) AS
    CASE WHEN w.other OR (COALESCE(ngpus, 0) > 0 AND gpu_type IS NULL AND len(w.typed) > 0) THEN NULL
         ELSE floor(w.cpu * COALESCE(ncpus, 0) + w.mem_gib * COALESCE(mem_bytes, 0) / 1073741824.0
                    + w.node * COALESCE(nnodes, 0)
                    + COALESCE(ngpus, 0) * (w.gpu + COALESCE(list_sum(list_transform(
                          list_filter(w.typed, lambda x: x.t = lower(gpu_type)), lambda x: x.w)), 0))
                    + 1e-9) END;

CREATE OR REPLACE VIEW calc_job_advice AS
WITH advised AS (
    SELECT cluster, job_id_raw,
           min(advised_ncpus) AS ncpus,
           min(advised_ngpus) AS ngpus,
           min(advised_mem_bytes) FILTER (WHERE code <> 'mem_fits_thin') AS mem_bytes,
           min(advised_mem_bytes) FILTER (WHERE code = 'mem_fits_thin') AS thin_mem_bytes,
           min(advised_timelimit_s) AS timelimit_s,
           COALESCE(max(advised_partition) FILTER (WHERE code IN ('gpu_idle', 'cpu_job_on_gpu_partition')),
                    max(advised_partition) FILTER (WHERE code = 'gpu_fits_smaller')) AS moved_to,
           max(advised_partition) FILTER (WHERE code = 'mem_fits_thin') AS thin,
           min(first_day) AS first_day, max(last_day) AS last_day
    FROM flag_scoped_job_flags
    GROUP BY ALL
), variants AS (
    SELECT m.*, a.ncpus AS a_ncpus, a.ngpus AS a_ngpus, a.mem_bytes AS a_mem_bytes, a.timelimit_s AS a_timelimit_s,
           COALESCE(a.moved_to, m."partition") AS a_partition, FALSE AS thin, a.first_day, a.last_day
    FROM advised a JOIN job_metrics m USING (cluster, job_id_raw)
    UNION ALL
    SELECT m.*, a.ncpus, a.ngpus, COALESCE(a.thin_mem_bytes, a.mem_bytes), a.timelimit_s, a.thin, TRUE,
           a.first_day, a.last_day
    FROM advised a JOIN job_metrics m USING (cluster, job_id_raw)
    WHERE a.thin IS DISTINCT FROM COALESCE(a.moved_to, m."partition") AND a.thin IS NOT NULL
), fitted AS (
    SELECT v.*,
           COALESCE(a_ncpus, ncpus) AS f_ncpus,
           COALESCE(a_ngpus, ngpus) AS f_ngpus,
           COALESCE(a_mem_bytes, mem_charged_bytes) AS f_mem_bytes,
           COALESCE(a_timelimit_s, timelimit_s) AS f_timelimit_s,
           -- a smaller GPU, or none, is of no type known here
           CASE WHEN COALESCE(a_ngpus, ngpus) > 0 AND a_partition IS NOT DISTINCT FROM "partition" THEN gpu_type END AS f_gpu_type
    FROM variants v
), priced AS (
    SELECT f.*,
           f.a_partition IS NOT DISTINCT FROM f."partition" AND f.f_ncpus IS NOT DISTINCT FROM f.ncpus
               AND f.f_ngpus IS NOT DISTINCT FROM f.ngpus AND f.f_mem_bytes IS NOT DISTINCT FROM f.mem_charged_bytes AS same_charge,
           slurm_billing(own.weights, f.ncpus, f.mem_charged_bytes, f.nnodes, f.ngpus, f.gpu_type) AS own_billing,
           own.weights IS NOT NULL AS own_known, target.weights IS NOT NULL AS target_known,
           slurm_billing(target.weights, f.f_ncpus, f.f_mem_bytes, f.nnodes, f.f_ngpus, f.f_gpu_type) AS target_billing,
           setting_text('charging.policy') = 'slurm-billing' AS by_billing
    FROM fitted f
    LEFT JOIN calc_partition_weights own ON own.cluster = f.cluster AND own."partition" = f."partition"
    LEFT JOIN calc_partition_weights target ON target.cluster = f.cluster AND target."partition" = f.a_partition
)
SELECT cluster, job_id_raw, a_partition AS "partition", f_gpu_type AS gpu_type, f_ncpus AS ncpus, f_ngpus AS ngpus,
       nnodes, f_mem_bytes AS mem_charged_bytes, elapsed_s, f_timelimit_s AS timelimit_s,
       CASE WHEN billing IS NULL OR NOT by_billing THEN NULL
            WHEN same_charge THEN billing
            WHEN own_billing = billing THEN target_billing END AS billing,
       CASE WHEN billing IS NULL OR NOT by_billing OR same_charge THEN NULL
            WHEN NOT own_known THEN 'no TRESBillingWeights known for partition ' || "partition"
            WHEN own_billing IS DISTINCT FROM billing
                THEN printf('the TRESBillingWeights known for partition %s give billing=%s, not the %d the job was charged',
                            "partition", COALESCE(CAST(own_billing AS BIGINT)::VARCHAR, 'unknown'), CAST(billing AS BIGINT))
            WHEN NOT target_known THEN 'no TRESBillingWeights known for partition ' || a_partition
            WHEN target_billing IS NULL THEN 'the TRESBillingWeights of partition ' || a_partition || ' price what the request does not say'
       END AS price_note,
       CASE WHEN f_ngpus = 0 AND ngpus > 0 AND a_partition IS NOT DISTINCT FROM "partition"
            THEN 'priced as partition ' || COALESCE("partition", '(none)')
                 || ' without its GPUs: no [advice] cpu_partition is set' END AS price_route,
       thin,
       -- the #SBATCH options that differ from the job's own request
       concat_ws(' ',
           CASE WHEN a_partition IS DISTINCT FROM "partition" THEN '--partition=' || a_partition END,
           CASE WHEN f_ncpus IS DISTINCT FROM ncpus
                -- the cores of one task: --ntasks=1 unless the job is known to have run one
                THEN CASE WHEN ntasks IS DISTINCT FROM 1 THEN '--ntasks=1 ' ELSE '' END || '--cpus-per-task=' || f_ncpus END,
           CASE WHEN f_mem_bytes IS DISTINCT FROM mem_charged_bytes
                THEN '--mem=' || CAST(round(f_mem_bytes / GREATEST(COALESCE(nnodes, 1), 1) / 1073741824.0) AS BIGINT) || 'G' END,
           CASE WHEN f_ngpus IS DISTINCT FROM ngpus
                THEN CASE WHEN f_ngpus = 0 THEN '--gres=none' ELSE '--gres=gpu:' || f_ngpus END END,
           CASE WHEN f_timelimit_s IS DISTINCT FROM timelimit_s THEN '--time=' || slurm_time(f_timelimit_s) END
       ) AS fitted_request,
       first_day, last_day
FROM priced;
