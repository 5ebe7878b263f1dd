-- The trust model (docs/ingest.md#trust-model): samples from a file owned by someone other than root
-- or the user running the ingest count only for that user's jobs. Those of a job that no accounting
-- names a user for yet are held here with the file's owner; the ingest whose accounting shows the job
-- is the owner's moves them into sample, and those of another user's job stay here, never counted.
-- Table sample therefore holds only samples that count.
CREATE TABLE IF NOT EXISTS sample_pending (
    cluster          VARCHAR NOT NULL,
    job_id_raw       VARCHAR NOT NULL,
    host             VARCHAR NOT NULL,
    device           VARCHAR NOT NULL,
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
    source           VARCHAR NOT NULL,
    ingest_id        BIGINT,
    owner_uid        BIGINT NOT NULL,       -- the file's owner
    owner_user       VARCHAR                -- its passwd name when the ingest ran (NULL: none)
);

-- The metadata row of a user's sidecar file carries the file's owner (NULL: a trusted file).
ALTER TABLE sidecar_run ADD COLUMN owner_uid BIGINT;
ALTER TABLE sidecar_run ADD COLUMN owner_user VARCHAR;
