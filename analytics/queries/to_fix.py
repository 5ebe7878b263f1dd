"""Jobs to fix: the jobs of a scope that wasted the most SBU in a period, each with its leading
advice, the #SBATCH lines that would have fit and what that request saves. It is the weekly
report's list of the jobs that wasted the most (sql/views/50_report.sql: jobs_to_fix and
report_top_jobs share window_jobs and top_job_details): a job's SBU, waste and saving are its
share inside the period (the day split of queries/scope.py), and over one user's, one account's or
the whole cluster's jobs the list holds that report's jobs, in its order, with its figures.

A read never writes: the rows of a scope narrower than everything (the columns the ranking reads)
are taken once into a temporary table of the connection (in memory), as the reports take theirs,
and dropped after."""
from __future__ import annotations

import datetime as dt

from jobsight.analytics.queries.scope import Filters, Scope

# a period left open reaches the first or last day a filter may name
OPEN_SINCE, OPEN_UNTIL = dt.datetime(1970, 1, 1), dt.datetime(2200, 1, 1)
ROWS = "jobs_to_fix_rows"          # the temporary table of a scope's rows (per connection)
# what the macro ranks them by (sql/views/50_report.sql, waste_candidates); the details of the
# first n jobs it reads from job_day (copying its 27 columns cost more than the ranking)
COLUMNS = 'cluster, job_id_raw, "user", account, day, fraction, sbu, wasted_sbu'


def jobs_to_fix(db, scope: Scope, f: Filters, n: int) -> list[dict]:
    """The first ``n`` jobs of the scope and filters (user, account, partition, cluster, state)
    that wasted most in the period, most wasted first; each a dict with: rank, cluster,
    job_id_raw, job_id, user, account, partition, state, job_name, sbu, wasted_sbu, savings_sbu
    (None: not priced; 0 without advice), savings_note, lead_advice, sbatch_lines, flag_codes,
    worst_severity and the job's efficiencies."""
    since, until = f.since_ts or OPEN_SINCE, f.until_ts or OPEN_UNTIL
    narrowed = scope.role != "admin" or any((f.user, f.account, f.partition, f.cluster, f.state))
    if not narrowed:
        return db.rows("SELECT * FROM jobs_to_fix('job_day', 'job_flags', ?, ?, ?)", [since, until, int(n)])
    where, params = f.where(scope)
    db.execute(f"CREATE OR REPLACE TEMP TABLE {ROWS} AS SELECT {COLUMNS} FROM job_day{where}", params)
    try:
        return db.rows(f"SELECT * FROM jobs_to_fix('{ROWS}', 'job_flags', ?, ?, ?)", [since, until, int(n)])
    finally:
        db.execute(f"DROP TABLE IF EXISTS {ROWS}")
