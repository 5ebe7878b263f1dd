"""What a weekly report reads: the report macros of sql/views/50_report.sql run once for a window,
over the whole cluster or over some users' and accounts' jobs, and the allocations. The window's
rows of report_job_day are materialised once as a table in memory (Database.shared_table: a read
never writes the database) that the report's cursors share; every macro then reads those, but the
trend and the flag counts, which add up the per-day summaries (dash_day, dash_flag_day), and the
top jobs' flags, read from job_flags.
``members`` gives a project page the Members table of the project's report, by the same macro."""
from __future__ import annotations

import concurrent.futures
import datetime as dt

from jobsight.analytics.queries.data_age import data_age
from jobsight.analytics.queries.scope import Filters, Scope

# a period left open reaches the first or last day a filter may name
OPEN_SINCE, OPEN_UNTIL = dt.datetime(1970, 1, 1), dt.datetime(2200, 1, 1)
MEMBER_ROWS = "members_rows"        # the temporary table of a scope's rows (per connection)


def most_wasted(r: dict):
    """The order of the reports' Members and leaderboard tables: most wasted SBU first, then most
    SBU, then the name."""
    return (-(r.get("wasted_sbu") or 0.0), -(r.get("sbu") or 0.0), str(r.get("user")))


def members(db, scope: Scope, f: Filters) -> list[dict]:
    """The members of the project ``f.account`` in the period and filters, most wasted first: the
    member rows of report_totals, which the project's weekly report shows as its Members table (the
    same figures for the same days), over the rows of the asker's scope (a researcher sees their
    own). Each: user, account, jobs, sbu, wasted_sbu, wasted_pct, savings_sbu, savings_pct,
    savings_unknown_sbu, core_hours, gpu_hours, idle_gpu_hours and the efficiencies."""
    if not f.account:
        return []
    since, until = f.since_ts or OPEN_SINCE, f.until_ts or OPEN_UNTIL
    where, params = f.where(scope)
    db.execute(f"CREATE OR REPLACE TEMP TABLE {MEMBER_ROWS} AS SELECT * FROM report_job_day{where}", params)
    try:
        rows = db.rows(f"SELECT * FROM report_totals('{MEMBER_ROWS}', ?, ?, scopes := ['member']) WHERE account = ?",
                       [since, until, f.account])
    finally:
        db.execute(f"DROP TABLE IF EXISTS {MEMBER_ROWS}")
    return sorted(rows, key=most_wasted)


def report_rows(db, since: dt.datetime, until: dt.datetime,
                names: tuple, trend_weeks: int, top_jobs: int) -> dict:
    """totals, daily, trend, flag_counts, top (each job ranked within its user, account and the
    cluster) and budgets (with alert_shown) of [since, until), the trend over it and the
    ``trend_weeks`` windows of its length before it;
    ``names``: (users, accounts) the rows are limited to, or (None, None). And data_age: how old
    the whole database's data is now, one DataAge for every report of the run.
    With ``names``, only the scopes their reports show are grouped (the users', the accounts' and
    their members'), not the partitions' and the cluster's of those rows."""
    if names == (None, None):
        by, kinds = "", []
    else:
        by, kinds = ", scopes := ?", [k for k, n in (("user", names[0]), ("account", names[1])) if n] or ["user"]
    scoped = [kinds] if kinds else []
    # three cursors side by side: the window's totals and days on this one, its top jobs on a second
    # (the window in a table both see), the summaries, which read no window, on a third
    with db.beside() as summary_db, db.beside() as top_db, db.shared_table("report_window") as src, \
            concurrent.futures.ThreadPoolExecutor(2) as pool:
        summaries = pool.submit(_summary_rows, summary_db, since, until, names, trend_weeks, by, scoped)
        db.execute(f"CREATE TABLE {src} AS SELECT * FROM report_days(?, ?, users := ?, accounts := ?)",
                   [since, until, *names])
        # the flags of the top jobs only, by job_flags' index on job_id_raw
        top = pool.submit(top_db.rows, "SELECT * FROM report_top_jobs(?, 'job_flags', ?, ?, ?)",
                          [src, since, until, top_jobs])
        return {
            "totals": db.rows(f"SELECT * FROM report_totals(?, ?, ?{by})",
                              [src, since, until, *([[*kinds, "member"]] if kinds else [])]),
            "daily": db.rows(f"SELECT * FROM report_daily(?, ?, ?{by})", [src, since, until, *scoped]),
            "top": top.result(),
            **summaries.result(),
        }


def _summary_rows(db, since, until, names: tuple, trend_weeks: int, by: str, scoped: list) -> dict:
    """trend, flag_counts, budgets and data_age: from the per-day summaries and the allocations."""
    return {
        "trend": db.rows(f"SELECT * FROM report_trend(?, ?, ?, users := ?, accounts := ?{by})",
                         [since, until, trend_weeks, *names, *scoped]),
        "flag_counts": db.rows(f"SELECT * FROM report_flag_counts(?, ?, users := ?, accounts := ?{by})",
                               [since, until, *names, *scoped]),
        # every allocation (there are few): a user's report shows those of the accounts the user ran in;
        # none without a budget row (budget_status alone takes DuckDB ~15 ms to plan)
        "budgets": [{**b, "alert_shown": b["alert"].upper()} for b in db.rows(
            'SELECT * FROM budget_status(?) ORDER BY account, "user" NULLS FIRST, cluster NULLS FIRST', [until])]
        if db.value("SELECT EXISTS (SELECT 1 FROM budget)") else [],
        "data_age": data_age(db),
    }
