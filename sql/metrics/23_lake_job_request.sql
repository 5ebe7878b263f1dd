-- lake_job_request: the requests lake_job_charge (24) prices, one row per job and partition: here
-- each job's own (its partition, gpu_type, ncpus, ngpus, nnodes, mem_charged_bytes, elapsed_s and
-- Slurm billing), with every column of lake_job_efficiency carried through to lake_job_metrics. The
-- database prices the request its flags advise (the stored job_advice, with the same columns)
-- through the same two files, 10 and 24 (analytics/store.py), so one definition prices both.
SELECT * FROM lake_job_efficiency
