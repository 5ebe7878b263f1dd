-- job_flags: one row per job and flag (the stored job_flag_codes, sql/metrics/40_job_flag_codes.sql)
-- with the job's identity and SBU, and what the flag says: a message carrying the job's numbers and
-- the concrete advice (the #SBATCH request that would have fit: the flag's advised_* numbers). The
-- text is formatted here, for the rows a reader asks for, not stored for every job.
-- job_flags_of(codes): the same for the rows of a table of job_flag_codes rows. A filter on
-- job_flags' columns reaches the stored tables' scans; a semi join (a set of jobs) does not get
-- under the text, so a reader of a set of jobs picks their job_flag_codes rows first.
-- Macros (gib, slurm_time, setting_value) are those of 40_job_flag_codes.sql.
CREATE OR REPLACE MACRO job_flags_of(codes) AS TABLE
SELECT f.cluster, f.job_id_raw, m.job_id, m.job_name, m."user", m.account, m."partition", m.state, m.start_time,
       m.end_time, m.elapsed_s, m.sbu, m.wasted_sbu, f.code, f.severity,
       CASE f.code
           WHEN 'gpu_idle' THEN printf('%d GPU(s) at %.1f%% mean utilisation for %.1f h: %.1f SBU burned on idle GPUs',
                                       m.ngpus, m.gpu_util_pct, m.elapsed_s / 3600.0, m.sbu)
           WHEN 'gpu_low_util' THEN printf('GPU utilisation %.1f%% (mean over %d GPU(s)); %.1f of %.1f SBU wasted',
                                           m.gpu_util_pct, m.ngpus, m.wasted_sbu, m.sbu)
           WHEN 'gpu_unused_devices' THEN printf('%d of %d GPUs idle (least-used GPU at %.1f%%)',
                                                 m.gpus_idle, m.ngpus, m.gpu_util_min_device_pct)
           WHEN 'gpu_fits_smaller' THEN printf('Peak GPU memory %.1f%% of the device and %.1f%% utilisation',
                                               m.gpu_mem_peak_pct, m.gpu_util_pct)
           WHEN 'cpu_low_eff' THEN printf('CPU efficiency %.1f%%: %.1f of %d cores busy on average',
                                          m.cpu_eff_pct, m.cpu_eff_pct * m.ncpus / 100.0, m.ncpus)
           WHEN 'cpu_serial_on_many' THEN printf('About one core busy (%.2f) of %d allocated: serial code on many cores',
                                                 m.cpu_eff_pct * m.ncpus / 100.0, m.ncpus)
           WHEN 'mem_oversized' THEN printf('Peak memory %.1f GiB of %.1f GiB allocated (%.1f%%)',
                                            gib(m.mem_peak_bytes), gib(m.mem_charged_bytes), m.mem_eff_pct)
           WHEN 'time_oversized' THEN printf('Ran %s of a %s limit (%.1f%%)',
                                             slurm_time(m.elapsed_s), slurm_time(m.timelimit_s), m.time_eff_pct)
           WHEN 'cpu_job_on_gpu_partition' THEN printf('No GPU requested on GPU partition %s', m."partition")
           WHEN 'mem_fits_thin' THEN printf('Peak memory %.1f GiB per node fits a %s node (%s GiB)',
                                            gib(m.mem_peak_bytes) / GREATEST(COALESCE(m.nnodes, 1), 1), f.advised_partition,
                                            CAST(setting_value('advice.mem_partition_node_gib') AS VARCHAR))
           WHEN 'failed_burn' THEN printf('%s (exit %s) after %.1f h: %.1f SBU burned',
                                          m.state, COALESCE(m.exit_code, '?'), m.elapsed_s / 3600.0, m.sbu)
       END AS message,
       CASE f.code
           WHEN 'gpu_idle' THEN 'Check that the code really uses the GPU (e.g. torch.cuda.is_available()); for interactive work request a GPU only while you need it, or drop it (--gres=none'
                                || COALESCE(' --partition=' || f.advised_partition, '') || ')'
           WHEN 'gpu_low_util' THEN 'Feed the GPU faster: more DataLoader workers (--cpus-per-task), pinned memory, larger batches; profile with the sidecar time series'
           WHEN 'gpu_unused_devices' THEN printf('--gres=gpu:%d (or make the code use all GPUs: DistributedDataParallel, one task per GPU)',
                                                 f.advised_ngpus)
           WHEN 'gpu_fits_smaller' THEN COALESCE('--partition=' || f.advised_partition || ': a MIG slice or a smaller GPU would do',
                                                 'A MIG slice or a smaller GPU would do: ask for the smallest GPU type your site offers')
           WHEN 'cpu_low_eff' THEN CASE WHEN m.ncpus > 1
               THEN printf('--cpus-per-task=%d (or --ntasks), or make the code use the cores it asks for', f.advised_ncpus)
               ELSE 'The one core waited most of the time: check for I/O waits, sleeps or lock contention' END
           WHEN 'cpu_serial_on_many' THEN '--ntasks=1 --cpus-per-task=1, or parallelise the code (threads, MPI, multiprocessing)'
           WHEN 'mem_oversized' THEN '--mem=' || f.advised_mem_bytes // (GREATEST(COALESCE(m.nnodes, 1), 1) * 1073741824) || 'G'
           WHEN 'time_oversized' THEN '--time=' || slurm_time(f.advised_timelimit_s) || ' (shorter limits start sooner through backfill)'
           WHEN 'cpu_job_on_gpu_partition' THEN COALESCE('--partition=' || f.advised_partition || ': submit CPU-only work to a CPU partition',
                                                         'Submit CPU-only work to a CPU partition')
           WHEN 'mem_fits_thin' THEN '--partition=' || f.advised_partition || ' --mem='
                                     || f.advised_mem_bytes // (GREATEST(COALESCE(m.nnodes, 1), 1) * 1073741824) || 'G, where that costs less'
           WHEN 'failed_burn' THEN CASE m.state
               WHEN 'OUT_OF_MEMORY' THEN '--mem=' || CAST(ceil(gib(GREATEST(COALESCE(m.mem_peak_bytes, 0), COALESCE(m.mem_charged_bytes, 0))) * 1.5) AS BIGINT) || 'G, or reduce the memory the code holds'
               WHEN 'TIMEOUT' THEN 'Checkpoint and restart, or a longer --time'
               WHEN 'NODE_FAIL' THEN 'Node failure: resubmit; ask support about a refund'
               ELSE 'Test on a short job (--time=00:10:00) before long runs' END
       END AS advice,
       f.first_day, f.last_day,
       f.advised_partition, f.advised_ncpus, f.advised_mem_bytes, f.advised_ngpus, f.advised_timelimit_s
FROM query_table(codes) f
JOIN job_metrics m USING (cluster, job_id_raw);

CREATE OR REPLACE VIEW job_flags AS SELECT * FROM job_flags_of('job_flag_codes');
