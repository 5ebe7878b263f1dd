-- sql/views/10_samples.sql job_cpu_samples.mem_limit_bytes: the sidecar's cgroup memory limit,
-- per host then summed; the memory a job is charged for when sacct has neither AllocTRES nor ReqMem.
SELECT cluster, job_id_raw, sum(mem_limit_bytes) AS mem_limit_bytes
FROM (
    SELECT cluster, job_id_raw, host, max(mem_total_bytes) AS mem_limit_bytes
    FROM lake_samples
    WHERE device = 'cpu'
    GROUP BY cluster, job_id_raw, host
) per_host
GROUP BY cluster, job_id_raw
