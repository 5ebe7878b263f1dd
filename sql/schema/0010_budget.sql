-- Allocations (budgets) per account, or per user within an account (analytics/budgets.py), that
-- sql/views/55_budget.sql compares with the burn. One row per source, account and user:
-- jobsight.toml's [budgets] (source `config`, in SBU), a saved `sacctmgr show assoc` named by
-- [budget_options] assoc_file (`file`), or `sacctmgr show assoc` run by `jobsight ingest
-- --from-sacct` (`sacctmgr`, per cluster); the last two in Slurm billing-minutes (GrpTRESMins
-- billing=N), converted to the charged unit by the view. Precedence: config, file, sacctmgr.
CREATE TABLE IF NOT EXISTS budget (
    cluster     VARCHAR,               -- NULL: every cluster (config, file); else that cluster's (sacctmgr)
    account     VARCHAR NOT NULL,
    "user"      VARCHAR,               -- NULL: the account's whole allocation
    amount      DOUBLE NOT NULL,
    unit        VARCHAR NOT NULL,      -- sbu | billing_minutes
    source      VARCHAR NOT NULL       -- config | file | sacctmgr
);
