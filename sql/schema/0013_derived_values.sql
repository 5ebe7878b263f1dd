-- derived: JSON {column: where its value came from} for the values a parser derived from other
-- columns of the same record because the column that holds them was absent (sacct text with
-- another --format set: cores from AllocTRES cpu=N, CPU time from UserCPU + SystemCPU, elapsed
-- from End - Start, GPUs from AllocGRES); NULL when every value was read as printed.
ALTER TABLE job ADD COLUMN IF NOT EXISTS derived VARCHAR;
ALTER TABLE step ADD COLUMN IF NOT EXISTS derived VARCHAR;

CREATE OR REPLACE VIEW jobs AS
SELECT cluster, job_id, job_id_raw, array_job_id, array_task_id, het_job_id, het_offset,
       job_name, "user", uid, "group", account, "partition", qos, state, cancelled_by_uid, exit_code,
       submit_time, eligible_time, start_time, end_time, elapsed_s, timelimit_s,
       ncpus, nnodes, ntasks, ngpus, gpu_type, mem_req_bytes, mem_alloc_bytes, mem_peak_bytes,
       cpu_time_s, billing, alloc_tres, req_tres, gpu_util_tres, gpu_mem_tres_bytes,
       node_list, restarts, null_reasons, derived, source
FROM job;

CREATE OR REPLACE VIEW steps AS
SELECT cluster, job_id_raw, step_id, job_id, step_name, state, cancelled_by_uid, exit_code,
       start_time, end_time, elapsed_s, ncpus, nnodes, ntasks, cpu_time_s, user_cpu_s, system_cpu_s,
       max_rss_bytes, ave_rss_bytes, max_vmsize_bytes, mem_usage_tot_bytes, gpu_util_tres,
       gpu_mem_tres_bytes, tres_usage_in_tot, tres_usage_in_max, tres_usage_in_ave, node_list,
       null_reasons, derived, source
FROM step;
