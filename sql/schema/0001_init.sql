-- jobsight database, schema version 1.
-- Tables hold what was ingested; the public views (jobs, steps, samples, rejects, ingests)
-- are what users, reports and the dashboard query. All times are TIMESTAMP in UTC.

CREATE TABLE IF NOT EXISTS ingest_log (
    ingest_id     BIGINT PRIMARY KEY,
    source_file   VARCHAR NOT NULL,     -- absolute path, or 'sacct:<args>' for --from-sacct
    checksum      VARCHAR,              -- sha256 of the bytes read
    format        VARCHAR NOT NULL,     -- sacct | sacct-json | seff | sidecar | nvidia-smi
    rows_in       BIGINT NOT NULL DEFAULT 0,
    stored        BIGINT NOT NULL DEFAULT 0,
    updated       BIGINT NOT NULL DEFAULT 0,
    unchanged     BIGINT NOT NULL DEFAULT 0,   -- rows identical to what the database already held
    rejected      BIGINT NOT NULL DEFAULT 0,
    dropped       BIGINT NOT NULL DEFAULT 0,   -- truncated last lines, counted not stored
    started_at    TIMESTAMP NOT NULL,
    finished_at   TIMESTAMP,
    options       VARCHAR                      -- JSON: timezone, cluster, columns given
);
CREATE SEQUENCE IF NOT EXISTS ingest_id_seq START 1;

-- One row per job allocation. Key (cluster, job_id_raw).
CREATE TABLE IF NOT EXISTS job (
    cluster          VARCHAR NOT NULL,
    job_id           VARCHAR NOT NULL,      -- as the scheduler prints it: 123, 123_4, 17+0
    job_id_raw       VARCHAR NOT NULL,      -- JobIDRaw (falls back to job_id when unknown)
    array_job_id     VARCHAR,
    array_task_id    VARCHAR,               -- '4', or '[1-10%2]' for a pending array record
    het_job_id       VARCHAR,
    het_offset       INTEGER,
    job_name         VARCHAR,
    "user"           VARCHAR,
    uid              BIGINT,
    "group"          VARCHAR,
    account          VARCHAR,
    "partition"      VARCHAR,
    qos              VARCHAR,
    state            VARCHAR,               -- normalised: CANCELLED, not 'CANCELLED by 1234'
    cancelled_by_uid BIGINT,
    exit_code        VARCHAR,               -- 'code:signal' as sacct prints it
    submit_time      TIMESTAMP,
    eligible_time    TIMESTAMP,
    start_time       TIMESTAMP,
    end_time         TIMESTAMP,
    elapsed_s        BIGINT,
    timelimit_s      BIGINT,                -- NULL = unlimited / unknown (see null_reasons)
    ncpus            BIGINT,
    nnodes           BIGINT,
    ntasks           BIGINT,
    ngpus            BIGINT,
    gpu_type         VARCHAR,
    mem_req_bytes    BIGINT,                -- ReqMem resolved to the job total
    mem_alloc_bytes  BIGINT,                -- AllocTRES mem
    mem_peak_bytes   BIGINT,                -- from accounting: largest step's TRESUsageInTot mem, else MaxRSS x ntasks
    cpu_time_s       DOUBLE,                -- TotalCPU (user + system)
    billing          DOUBLE,                -- AllocTRES billing
    alloc_tres       VARCHAR,
    req_tres         VARCHAR,
    gpu_util_tres    DOUBLE,                -- TRESUsageInTot gres/gpuutil, where Slurm recorded it
    gpu_mem_tres_bytes BIGINT,              -- TRESUsageInTot gres/gpumem
    node_list        VARCHAR,
    restarts         INTEGER,
    null_reasons     VARCHAR,               -- JSON {column: raw text} for values stored as NULL, e.g. {"timelimit_s":"UNLIMITED"}
    source           VARCHAR NOT NULL,      -- slurm-sacct | slurm-sacct-json | slurm-seff | sidecar | nvidia-smi
    ingest_id        BIGINT,
    PRIMARY KEY (cluster, job_id_raw)
);

-- One row per job step (.batch, .extern, .interactive, .0, ...). Key (cluster, job_id_raw, step_id).
CREATE TABLE IF NOT EXISTS step (
    cluster          VARCHAR NOT NULL,
    job_id_raw       VARCHAR NOT NULL,
    step_id          VARCHAR NOT NULL,      -- batch | extern | interactive | 0 | 1 ...
    job_id           VARCHAR,               -- the parent's JobID as printed (123_4)
    step_name        VARCHAR,
    state            VARCHAR,
    cancelled_by_uid BIGINT,
    exit_code        VARCHAR,
    start_time       TIMESTAMP,
    end_time         TIMESTAMP,
    elapsed_s        BIGINT,
    ncpus            BIGINT,
    nnodes           BIGINT,
    ntasks           BIGINT,
    cpu_time_s       DOUBLE,
    user_cpu_s       DOUBLE,
    system_cpu_s     DOUBLE,
    max_rss_bytes    BIGINT,
    ave_rss_bytes    BIGINT,
    max_vmsize_bytes BIGINT,
    mem_usage_tot_bytes BIGINT,             -- TRESUsageInTot mem: sum of the step's task peaks
    gpu_util_tres    DOUBLE,
    gpu_mem_tres_bytes BIGINT,
    tres_usage_in_tot VARCHAR,
    tres_usage_in_max VARCHAR,
    tres_usage_in_ave VARCHAR,
    node_list        VARCHAR,
    null_reasons     VARCHAR,
    source           VARCHAR NOT NULL,
    ingest_id        BIGINT,
    PRIMARY KEY (cluster, job_id_raw, step_id)
);

-- Time series from the sidecar and nvidia-smi logs, long format: one row per device per sample.
-- No primary key (50M-row scale); the loader dedupes on (cluster, job_id_raw, host, device, time).
CREATE TABLE IF NOT EXISTS sample (
    cluster          VARCHAR NOT NULL,
    job_id_raw       VARCHAR NOT NULL,
    host             VARCHAR NOT NULL,
    device           VARCHAR NOT NULL,      -- 'cpu' or a GPU UUID (GPU-..., MIG-...)
    time             TIMESTAMP NOT NULL,
    util_pct         DOUBLE,
    mem_used_bytes   BIGINT,
    mem_total_bytes  BIGINT,
    gpu_index        INTEGER,
    power_w          DOUBLE,
    energy_j         DOUBLE,
    sm_clock_mhz     DOUBLE,
    temperature_c    DOUBLE,
    sm_active_pct    DOUBLE,
    source           VARCHAR NOT NULL,      -- sidecar | nvidia-smi
    ingest_id        BIGINT
);

-- Sidecar metadata JSON, one row per sidecar file (job, host, start).
CREATE TABLE IF NOT EXISTS sidecar_run (
    cluster          VARCHAR NOT NULL,
    job_id_raw       VARCHAR NOT NULL,
    host             VARCHAR NOT NULL,
    started_at       TIMESTAMP,
    interval_s       DOUBLE,
    scheduler        VARCHAR,
    cpu_method       VARCHAR,               -- cgroup-v2 | cgroup-v1 | psutil
    alloc_cores      INTEGER,
    gpus             VARCHAR,               -- JSON [{uuid, index, name, mig}]
    driver_version   VARCHAR,
    nvml_version     VARCHAR,
    metadata         VARCHAR,               -- the whole JSON as written
    source_file      VARCHAR,
    ingest_id        BIGINT,
    PRIMARY KEY (cluster, job_id_raw, host, source_file)
);

-- Every input row that was not stored, with where it came from and why.
CREATE TABLE IF NOT EXISTS reject (
    ingest_id        BIGINT,
    source_file      VARCHAR NOT NULL,
    line_no          BIGINT,                -- 1-based line in the file (JSON: the job's index)
    reason           VARCHAR NOT NULL,
    raw              VARCHAR
);

CREATE OR REPLACE VIEW jobs AS
SELECT cluster, job_id, job_id_raw, array_job_id, array_task_id, het_job_id, het_offset,
       job_name, "user", uid, "group", account, "partition", qos, state, cancelled_by_uid, exit_code,
       submit_time, eligible_time, start_time, end_time, elapsed_s, timelimit_s,
       ncpus, nnodes, ntasks, ngpus, gpu_type, mem_req_bytes, mem_alloc_bytes, mem_peak_bytes,
       cpu_time_s, billing, alloc_tres, req_tres, gpu_util_tres, gpu_mem_tres_bytes,
       node_list, restarts, null_reasons, source
FROM job;

CREATE OR REPLACE VIEW steps AS
SELECT cluster, job_id_raw, step_id, job_id, step_name, state, cancelled_by_uid, exit_code,
       start_time, end_time, elapsed_s, ncpus, nnodes, ntasks, cpu_time_s, user_cpu_s, system_cpu_s,
       max_rss_bytes, ave_rss_bytes, max_vmsize_bytes, mem_usage_tot_bytes, gpu_util_tres,
       gpu_mem_tres_bytes, tres_usage_in_tot, tres_usage_in_max, tres_usage_in_ave, node_list,
       null_reasons, source
FROM step;

CREATE OR REPLACE VIEW samples AS
SELECT cluster, job_id_raw, host, device, time, util_pct, mem_used_bytes, mem_total_bytes,
       gpu_index, power_w, energy_j, sm_clock_mhz, temperature_c, sm_active_pct, source
FROM sample;

CREATE OR REPLACE VIEW rejects AS
SELECT r.source_file, r.line_no, r.reason, r.raw, r.ingest_id, i.format
FROM reject r LEFT JOIN ingest_log i USING (ingest_id);

CREATE OR REPLACE VIEW ingests AS
SELECT ingest_id, source_file AS file, checksum, format, rows_in, stored, updated, unchanged,
       rejected, dropped, started_at, finished_at AS time, options
FROM ingest_log;
