-- Schema version 3: the job and step tables without their PRIMARY KEY indexes.
-- The keys stay (cluster, job_id_raw) and (cluster, job_id_raw, step_id), kept unique by the loader
-- (analytics/ingest.py: the merge rule, and a repeated-key check after a bulk insert), as the sample
-- table's key always was. The ART index behind a PRIMARY KEY cost ~40 % of a big insert and ~2.5 s
-- of COMMIT per 3M rows, and answered no query a scan does not answer in milliseconds.
-- DuckDB cannot drop a constraint, so each table is rebuilt: same columns, same order, same data.

CREATE TABLE job_v3 (
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
    ingest_id        BIGINT
);
INSERT INTO job_v3 SELECT * FROM job;
DROP TABLE job;
ALTER TABLE job_v3 RENAME TO job;

CREATE TABLE step_v3 (
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
    ingest_id        BIGINT
);
INSERT INTO step_v3 SELECT * FROM step;
DROP TABLE step;
ALTER TABLE step_v3 RENAME TO step;
