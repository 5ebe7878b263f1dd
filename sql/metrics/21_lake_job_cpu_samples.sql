-- The job's CPU and memory as the sidecar saw them (its `cpu` rows, per host in
-- lake_job_cpu_hosts), over its hosts: memory summed (the cgroup limit is the memory charged when
-- sacct has neither AllocTRES nor ReqMem), CPU time-weighted, as jobstats does per node.
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
FROM lake_job_cpu_hosts
GROUP BY cluster, job_id_raw
