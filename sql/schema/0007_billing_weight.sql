-- Slurm's TRESBillingWeights per partition (analytics/billing_weights.py): what prices an advised
-- request under the slurm-billing policy (sql/metrics/45_job_advice.sql). One row per partition
-- and TRES; memory per GiB. cluster NULL: every cluster (jobsight.toml, or a saved
-- `scontrol show partition -o` it names); else that cluster's (`jobsight ingest --from-sacct`).
CREATE TABLE IF NOT EXISTS billing_weight (
    cluster      VARCHAR,
    "partition"  VARCHAR NOT NULL,
    tres         VARCHAR NOT NULL,     -- cpu, mem, node, gres/gpu, gres/gpu:<type>, ... (lower case)
    weight       DOUBLE NOT NULL,
    source       VARCHAR NOT NULL      -- config | file | scontrol
);
