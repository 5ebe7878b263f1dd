"""What a weekly report reads: the report macros of sql/views/50_report.sql run once for a window,
over the whole cluster or over some users' and accounts' jobs, and the allocations. The window's
rows of report_job_day (back to the trend's first window) and their flags are materialised once as
temporary tables (in memory: a read never writes the database); every macro then reads those."""
from __future__ import annotations

import datetime as dt

from jobsight.analytics.queries.data_age import data_age


def report_rows(db, first: dt.datetime, since: dt.datetime, until: dt.datetime,
                names: tuple, trend_weeks: int, top_jobs: int) -> dict:
    """totals, daily, trend, flag_counts, top (each job ranked within its user, account and the
    cluster) and budgets (with alert_shown) of [since, until), the trend from ``first``;
    ``names``: (users, accounts) the rows are limited to, or (None, None). And data_age: how old
    the whole database's data is now, one DataAge for every report of the run."""
    db.execute("CREATE OR REPLACE TEMP TABLE report_window AS "
               "SELECT * FROM report_days(?, ?, users := ?, accounts := ?)", [first, until, *names])
    db.execute("CREATE OR REPLACE TEMP TABLE report_window_flags AS SELECT * FROM report_flags('report_window', ?)",
               [since])
    src, flags = "report_window", "report_window_flags"
    try:
        return {
            "totals": db.rows("SELECT * FROM report_totals(?, ?, ?)", [src, since, until]),
            "daily": db.rows("SELECT * FROM report_daily(?, ?, ?)", [src, since, until]),
            "trend": db.rows("SELECT * FROM report_trend(?, ?, ?, ?)", [src, since, until, trend_weeks]),
            "flag_counts": db.rows("SELECT * FROM report_flag_counts(?, ?, ?, ?)", [src, flags, since, until]),
            "top": db.rows("SELECT * FROM report_top_jobs(?, ?, ?, ?, ?)", [src, flags, since, until, top_jobs]),
            # every allocation (there are few): a user's report shows those of the accounts the user ran in
            "budgets": [{**b, "alert_shown": b["alert"].upper()} for b in db.rows(
                'SELECT * FROM budget_status(?) ORDER BY account, "user" NULLS FIRST, cluster NULLS FIRST', [until])],
            "data_age": data_age(db),
        }
    finally:
        db.execute("DROP TABLE report_window")
        db.execute("DROP TABLE report_window_flags")
