-- The job's CPU and memory as the sidecar saw them (its `cpu` rows): per host first, then summed
-- (memory; the cgroup limit is the memory charged when sacct has neither AllocTRES nor ReqMem) or
-- time-weighted (CPU) over hosts, as jobstats does per node.
SELECT cluster, job_id_raw,
       count(*)        AS hosts_sampled,
       CASE WHEN sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END) > 0
            THEN sum(util_pct * weight_s) / NULLIF(sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END), 0)
            ELSE avg(util_pct) END AS cpu_util_pct,
       sum(mem_peak_bytes)  AS mem_peak_bytes,
       sum(mem_limit_bytes) AS mem_limit_bytes,
       sum(n_samples)       AS n_samples,
       min(first_time)      AS first_time,
       max(last_time)       AS last_time
FROM (
    SELECT cluster, job_id_raw, host,
           CASE WHEN sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END) > 0
                THEN sum(util_pct * weight_s) / NULLIF(sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END), 0)
                ELSE avg(util_pct) END                           AS util_pct,
           sum(CASE WHEN util_pct IS NOT NULL THEN weight_s END) AS weight_s,
           max(mem_used_bytes)                                   AS mem_peak_bytes,
           max(mem_total_bytes)                                  AS mem_limit_bytes,
           count(*)                                              AS n_samples,
           min(time)                                             AS first_time,
           max(time)                                             AS last_time
    FROM lake_sample_weighted
    WHERE device = 'cpu'
    GROUP BY cluster, job_id_raw, host
) per_host
GROUP BY cluster, job_id_raw
