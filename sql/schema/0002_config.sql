-- Settings the metric views read: flag thresholds and charging options, written from
-- jobsight.toml (analytics/config.py) each time a command opens the database, so that the
-- SQL views stay the single definition of every number and users querying the file see the
-- same results as the CLI.
CREATE TABLE IF NOT EXISTS setting (
    name   VARCHAR PRIMARY KEY,   -- e.g. 'flags.gpu_low_util_pct'
    value  DOUBLE,
    text   VARCHAR                -- for non-numeric settings, e.g. charging.policy
);

-- Charging table (policy `table`, and the fallback of `slurm-billing` for jobs with no billing TRES).
-- partition '*' matches any partition; gpu_type NULL matches any GPU type.
CREATE TABLE IF NOT EXISTS charge_rate (
    "partition"      VARCHAR NOT NULL,
    gpu_type         VARCHAR,
    per_core_h       DOUBLE NOT NULL DEFAULT 0,   -- SBU per core-hour
    per_gpu_h        DOUBLE NOT NULL DEFAULT 0,   -- SBU per GPU-hour
    per_gb_h         DOUBLE NOT NULL DEFAULT 0,   -- SBU per GiB-hour of memory
    min_cores        DOUBLE NOT NULL DEFAULT 0,   -- smallest charged allocation
    min_gpus         DOUBLE NOT NULL DEFAULT 0,
    mem_per_core_gb  DOUBLE,                      -- memory beyond this per core is charged as extra cores
    cores_per_gpu    DOUBLE,                      -- cores beyond this per GPU are charged as extra GPUs
    mem_per_gpu_gb   DOUBLE                       -- memory beyond this per GPU is charged as extra GPUs
);
