-- lake_job_charge: what each request of lake_job_request (23) is charged, by the charging policy
-- (docs/charging.md), with the request's columns carried through. The one definition of a charge:
-- the job's own request here, the request its flags advise in the database's job_savings.
--   rate: the charge_rate row of the request's cluster that applies, its partition before '*', its
--         GPU type before any. The window picks one per distinct (cluster, partition, gpu_type), a
--         few hundred, not per request (a million): NULLs are keyed as '' plus an is-NULL flag, so
--         both engines hash-join the requests to their pick.
--   sbu:  policy slurm-billing and a billing TRES: billing x hours x charging.factor; else with a
--         rate: hours x (charged cores x per_core_h + charged GPUs x per_gpu_h + GiB x per_gb_h);
--         else core-hours (NULL for a job that ran on an unknown number of cores). sbu_source names
--         the route taken.
-- GREATEST gets no NULL argument (no rate: 0), which equals DuckDB's and Spark's NULL-skipping
-- GREATEST for these non-negative counts, and keeps Trino (whose GREATEST returns NULL) right too.
SELECT charged.*,
    CASE WHEN charged.charging_policy = 'slurm-billing' AND charged.billing IS NOT NULL
             THEN charged.billing * charged.elapsed_s / 3600e0 * charged.charging_factor
         WHEN charged.per_core_h IS NOT NULL
             THEN charged.elapsed_s / 3600e0 * (charged.charged_cores * charged.per_core_h
                                                + charged.charged_gpus * charged.per_gpu_h
                                                + charged.mem_gib * charged.per_gb_h)
         ELSE charged.core_hours END AS sbu,
    CASE WHEN charged.charging_policy = 'slurm-billing' AND charged.billing IS NOT NULL THEN 'billing'
         WHEN charged.per_core_h IS NOT NULL THEN 'table'
         ELSE 'core-hours' END AS sbu_source
FROM (
    SELECT rated.*,
        -- a job that ran on an unknown number of cores has unknown core-hours, not 0
        CASE WHEN rated.elapsed_s = 0 THEN 0e0 ELSE rated.elapsed_s * rated.ncpus / 3600e0 END AS core_hours,
        COALESCE(rated.mem_charged_bytes, 0) / 1073741824e0 AS mem_gib,
        GREATEST(COALESCE(rated.ncpus, 0), COALESCE(rated.min_cores, 0e0),
                 COALESCE(ceil(COALESCE(rated.mem_charged_bytes, 0) / 1073741824e0
                               / NULLIF(rated.mem_per_core_gb, 0)), 0e0)) AS charged_cores,
        CASE WHEN COALESCE(rated.ngpus, 0) > 0 THEN
             GREATEST(rated.ngpus, COALESCE(rated.min_gpus, 0e0),
                      COALESCE(ceil(COALESCE(rated.ncpus, 0) / NULLIF(rated.cores_per_gpu, 0)), 0e0),
                      COALESCE(ceil(COALESCE(rated.mem_charged_bytes, 0) / 1073741824e0
                                    / NULLIF(rated.mem_per_gpu_gb, 0)), 0e0))
             ELSE 0e0 END AS charged_gpus,
        -- memory drove the charge when it bought more cores than were asked for
        rated.mem_per_core_gb IS NOT NULL AND COALESCE(rated.ngpus, 0) = 0
            AND ceil(COALESCE(rated.mem_charged_bytes, 0) / 1073741824e0 / NULLIF(rated.mem_per_core_gb, 0))
                > GREATEST(COALESCE(rated.ncpus, 0), COALESCE(rated.min_cores, 0e0)) AS mem_drove_charge
    FROM (
        SELECT q.*, s.charging_policy, s.charging_factor, r.per_core_h, r.per_gpu_h, r.per_gb_h,
               r.min_cores, r.min_gpus, r.mem_per_core_gb, r.cores_per_gpu, r.mem_per_gpu_gb
        FROM lake_job_request q
        JOIN lake_config s ON s.cluster = q.cluster
        LEFT JOIN (
            SELECT k.cluster, k.partition_key, k.partition_null, k.gpu_type_key, k.gpu_type_null,
                   r.per_core_h, r.per_gpu_h, r.per_gb_h, r.min_cores, r.min_gpus, r.mem_per_core_gb,
                   r.cores_per_gpu, r.mem_per_gpu_gb,
                   row_number() OVER (PARTITION BY k.cluster, k.partition_key, k.partition_null,
                                                   k.gpu_type_key, k.gpu_type_null
                                      ORDER BY CASE WHEN r.partition = k.partition THEN 1 ELSE 0 END DESC,
                                               CASE WHEN r.gpu_type IS NOT NULL THEN 1 ELSE 0 END DESC) AS rate_pick
            FROM (
                SELECT DISTINCT cluster, partition, gpu_type,
                       COALESCE(partition, '') AS partition_key, partition IS NULL AS partition_null,
                       COALESCE(gpu_type, '') AS gpu_type_key, gpu_type IS NULL AS gpu_type_null
                FROM lake_job_request
            ) k
            JOIN lake_charge_rate r
              ON r.cluster = k.cluster
             AND (r.partition = k.partition OR r.partition = '*')
             AND (r.gpu_type IS NULL OR r.gpu_type = k.gpu_type)
        ) r
          ON r.rate_pick = 1
         AND r.cluster = q.cluster
         AND r.partition_key = COALESCE(q.partition, '') AND r.partition_null = (q.partition IS NULL)
         AND r.gpu_type_key = COALESCE(q.gpu_type, '') AND r.gpu_type_null = (q.gpu_type IS NULL)
    ) rated
) charged
